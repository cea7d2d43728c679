// The dashboard's one way to the service: API calls carrying the session's credential
// (ApiFailure from the service's ApiError body), Server-Sent Events read with fetch (an
// EventSource cannot send an Authorization header, and a credential never goes in a URL),
// and the credential itself, kept in sessionStorage for this browser tab only.

/** The service's paths the pages call (the API document is /openapi.json). */
export const PATHS = {
  queues: '/internal/v1/context/queues',
  pause: (kind) => `/internal/v1/context/queues/${encodeURIComponent(kind)}/pause`,
  resume: (kind) => `/internal/v1/context/queues/${encodeURIComponent(kind)}/resume`,
  operations: '/internal/v1/context/operations',
  operationsEvents: '/internal/v1/context/operations/events',
  bulk: '/internal/v1/context/operations/bulk',
  operation: (id) => `/internal/v1/context/operations/${encodeURIComponent(id)}`,
  operationRequest: (id) => `/internal/v1/context/operations/${encodeURIComponent(id)}/request`,
  operationEvents: (id) => `/internal/v1/context/operations/${encodeURIComponent(id)}/events`,
  cancel: (id) => `/internal/v1/context/operations/${encodeURIComponent(id)}/cancel`,
  retry: (id) => `/internal/v1/context/operations/${encodeURIComponent(id)}/retry`,
  artifact: (id) => `/internal/v1/context/export-artifacts/${encodeURIComponent(id)}`,
  artifactChunk: '/internal/v1/context/export-artifacts/chunk',
  exports: '/internal/v1/context/exports',
  conversations: '/internal/v1/context/conversations:list',
  messagesPage: '/internal/v1/context/messages',
  recall: '/internal/v1/context/recall',
  entryGet: '/internal/v1/context/entries/get',
  entryHistory: (id) => `/internal/v1/context/entries/${encodeURIComponent(id)}/history`,
};

const TOKEN_KEY = 'context-ops.credential';

/** A call the service refused: its status and the ApiError message. */
export class ApiFailure extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'ApiFailure';
    this.status = status;
  }
}

/** Who is signed in: `token` (empty in open mode), `admin`, `open` (no credential needed). */
export const session = { token: sessionStorage.getItem(TOKEN_KEY) || '', admin: false, open: false };

export function keepToken(token) {
  session.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  session.token = '';
  session.admin = false;
  sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra) {
  const h = { ...extra };
  if (session.token) h.Authorization = `Bearer ${session.token}`;
  return h;
}

async function failure(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && typeof body.message === 'string') message = body.message;
  } catch {
    // Not an ApiError body (a proxy's page): the status line says enough.
  }
  return new ApiFailure(response.status, message);
}

/**
 * One API call: the parsed JSON answer (null for 204), or an ApiFailure.
 * `options.token` overrides the session's credential ('' sends none).
 */
export async function api(method, path, body, options = {}) {
  const extra = { Accept: 'application/json' };
  if (body !== undefined) extra['Content-Type'] = 'application/json';
  const h = headers(extra);
  if (options.token !== undefined) {
    delete h.Authorization;
    if (options.token) h.Authorization = `Bearer ${options.token}`;
  }
  const response = await fetch(path, {
    method,
    headers: h,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
  });
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return null;
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** A query string of the given parameters, leaving out empty ones. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Feed decoded text; calls `dispatch({id, data})` for each complete event. */
function sseParser(dispatch) {
  let buffer = '';
  let id;
  let data = [];
  return (text) => {
    buffer += text;
    let newline;
    while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
      if (line === '') {
        if (id !== undefined || data.length) dispatch({ id, data: data.join('\n') });
        id = undefined;
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue; // a heartbeat comment
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'id') id = value;
      else if (field === 'data') data.push(value);
    }
  };
}

/**
 * Read an event stream: `onEvent(operation, id)` for each event with data; reconnects
 * with Last-Event-ID (backing off) until stopped, until the service says nothing more will
 * come (204), or on a refusal (4xx other than 429). `onState('open'|'retrying'|'ended'|
 * 'failed', detail)` reports the connection. Returns the function that stops it.
 */
export function stream(path, onEvent, onState = () => {}) {
  let stopped = false;
  let lastId = null;
  let controller = null;
  (async () => {
    let delay = 500;
    while (!stopped) {
      let cleanEnd = false;
      controller = new AbortController();
      try {
        const extra = { Accept: 'text/event-stream' };
        if (lastId !== null) extra['Last-Event-ID'] = lastId;
        const response = await fetch(path, {
          headers: headers(extra),
          signal: controller.signal,
          cache: 'no-store',
          credentials: 'omit',
        });
        if (response.status === 204) {
          onState('ended');
          return;
        }
        if (!response.ok) throw await failure(response);
        onState('open');
        delay = 500;
        let received = false;
        const feed = sseParser(({ id, data }) => {
          received = true;
          if (id !== undefined) lastId = id;
          if (data) onEvent(JSON.parse(data), id);
        });
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          feed(value);
        }
        cleanEnd = received;
      } catch (e) {
        if (stopped) return;
        if (e instanceof ApiFailure && e.status >= 400 && e.status < 500 && e.status !== 429) {
          onState('failed', e);
          return;
        }
      }
      if (stopped) return;
      // A stream that ended cleanly (one operation's, after its terminal state) is asked
      // again at once: the service answers 204 when nothing more will come.
      if (cleanEnd) continue;
      onState('retrying');
      await sleep(delay);
      delay = Math.min(delay * 2, 15000);
    }
  })();
  return () => {
    stopped = true;
    if (controller) controller.abort();
  };
}
