// The dashboard's shell: who is signed in (open mode, a token or JWT, admin or not), the
// navigation, and the hash router that renders one page module at a time into <main>.
// A page module exports `async function render(main, params, ctx)` and may return a
// cleanup function, called when the user navigates away (streams, timers).

import { ApiFailure, PATHS, api, forgetToken, keepToken, query, session, stream } from './api.js';
import { confirm, el, svg } from './widgets.js';
import * as overview from './overview.js';
import * as operations from './operations.js';
import * as operation from './operation.js';
import * as controls from './controls.js';
import * as conversations from './conversations.js';
import * as entries from './entries.js';

/** `pattern` matches the hash's path; its named groups are the page's params. */
const ROUTES = [
  { pattern: /^\/overview$/, module: overview, title: 'Overview' },
  { pattern: /^\/operations$/, module: operations, title: 'Operations' },
  { pattern: /^\/operations\/(?<id>[0-9A-Za-z]{26})$/, module: operation, title: 'Operation' },
  { pattern: /^\/controls$/, module: controls, title: 'Controls', admin: true },
  { pattern: /^\/conversations$/, module: conversations, title: 'Conversations' },
  { pattern: /^\/conversations\/(?<id>[^/]+)$/, module: conversations, title: 'Conversation' },
  { pattern: /^\/entries$/, module: entries, title: 'Entries' },
  { pattern: /^\/entries\/(?<id>[^/]+)$/, module: entries, title: 'Entry' },
];

/** The navigation links, in order. */
const NAV = [
  { href: '#/overview', label: 'Overview' },
  { href: '#/operations', label: 'Operations' },
  { href: '#/controls', label: 'Controls', admin: true },
  { href: '#/conversations', label: 'Conversations' },
  { href: '#/entries', label: 'Entries' },
];

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const banner = document.getElementById('banner');
const notice = document.getElementById('notice');

let cleanup = null;
let rendering = 0;

/** What every page gets. */
const ctx = {
  api,
  stream,
  session,
  el,
  svg,
  confirm,
  paths: PATHS,
  query,
  /** A short message in the polite live region (a result of an action). */
  notify(text) {
    notice.textContent = '';
    // A fresh text node after clearing: screen readers announce a repeated message too.
    setTimeout(() => {
      notice.textContent = text;
    }, 30);
  },
  navigate(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
};

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/overview';
  const [path, search = ''] = raw.split('?');
  return { path, query: new URLSearchParams(search) };
}

function drawNav(path) {
  nav.replaceChildren(
    ...NAV.filter((n) => !n.admin || session.admin).map((n) => {
      const current = path === n.href.slice(1) || path.startsWith(`${n.href.slice(1)}/`);
      return el('li', {}, el('a', { href: n.href, 'aria-current': current ? 'page' : null }, n.label));
    }),
  );
}

function drawWho() {
  if (session.open) {
    who.replaceChildren(el('span', { class: 'muted' }, 'Open mode'));
    return;
  }
  who.replaceChildren(
    el('span', { class: 'muted' }, session.admin ? 'Signed in (admin)' : 'Signed in'),
    el('button', { type: 'button', on: { click: signOut } }, 'Sign out'),
  );
}

function signOut() {
  forgetToken();
  stopPage();
  start('Signed out.');
}

function stopPage() {
  if (cleanup) {
    try {
      cleanup();
    } catch (e) {
      console.error(e);
    }
  }
  cleanup = null;
}

function errorPanel(error) {
  const message = error instanceof ApiFailure ? `${error.status}: ${error.message}` : String(error.message || error);
  return el('div', { class: 'error', role: 'alert' }, el('h2', {}, 'Something went wrong'), el('p', {}, message));
}

async function route() {
  stopPage();
  const { path, query } = parseHash();
  drawNav(path);
  const found = ROUTES.map((r) => ({ r, m: path.match(r.pattern) })).find((x) => x.m);
  const turn = ++rendering;
  main.replaceChildren();
  if (found && found.r.admin && !session.admin) {
    document.title = `${found.r.title} · context-ops`;
    main.append(el('h1', {}, found.r.title), el('p', { role: 'alert' }, 'This page needs an admin credential (the admin token, or a JWT with "admin": true).'));
    return;
  }
  if (!found) {
    document.title = 'Not found · context-ops';
    main.append(el('h1', {}, 'Not found'), el('p', {}, 'No such page. ', el('a', { href: '#/overview' }, 'Go to the overview'), '.'));
    return;
  }
  document.title = `${found.r.title} · context-ops`;
  try {
    const stop = await found.r.module.render(main, { ...found.m.groups, query }, ctx);
    if (turn !== rendering) {
      // The user moved on while this page was loading.
      if (typeof stop === 'function') stop();
      return;
    }
    cleanup = typeof stop === 'function' ? stop : null;
  } catch (e) {
    if (turn !== rendering) return;
    if (e instanceof ApiFailure && e.status === 401 && !session.open) {
      forgetToken();
      start('Your credential was refused; sign in again.');
      return;
    }
    console.error(e);
    main.append(errorPanel(e));
  }
}

function signInForm(message) {
  document.title = 'Sign in · context-ops';
  nav.replaceChildren();
  who.replaceChildren();
  const input = el('input', { id: 'credential', type: 'password', name: 'credential', autocomplete: 'off', required: true, spellcheck: 'false' });
  const status = el('p', { class: 'form-error', role: 'alert' }, message || '');
  const form = el(
    'form',
    { class: 'sign-in', 'aria-labelledby': 'sign-in-title' },
    el('h1', { id: 'sign-in-title' }, 'Sign in'),
    el('p', {}, 'Enter the bearer token or JWT you use with the API. It is kept in this browser tab only (session storage) and sent only as an Authorization header.'),
    el('label', { for: 'credential' }, 'Token or JWT'),
    input,
    el('button', { type: 'submit' }, 'Sign in'),
    status,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    try {
      const figures = await api('GET', PATHS.queues, undefined, { token });
      keepToken(token);
      signedIn(figures);
    } catch (e) {
      status.textContent = e instanceof ApiFailure && e.status === 401 ? 'That credential was refused.' : `Sign-in failed: ${e.message}`;
    }
  });
  main.replaceChildren(form);
  input.focus();
}

/** The queue figures answer whoever may call the API; their `workers` only an admin. */
function signedIn(figures) {
  session.admin = Array.isArray(figures.workers);
  banner.hidden = !session.open;
  banner.textContent = session.open
    ? 'Open mode: this service accepts calls without any credential, and everyone is an admin. Use it locally only.'
    : '';
  drawWho();
  if (!location.hash) history.replaceState(null, '', '#/overview');
  route();
}

/** Find out how we may call the service: open mode, the kept credential, or sign in. */
async function start(message) {
  session.open = false;
  banner.hidden = true;
  try {
    const figures = await api('GET', PATHS.queues, undefined, { token: '' });
    session.open = true;
    forgetToken();
    signedIn(figures);
    return;
  } catch (e) {
    if (!(e instanceof ApiFailure && e.status === 401)) {
      main.replaceChildren(errorPanel(e));
      return;
    }
  }
  if (!session.token) {
    signInForm(message);
    return;
  }
  try {
    signedIn(await api('GET', PATHS.queues));
  } catch (e) {
    if (e instanceof ApiFailure && e.status === 401) {
      forgetToken();
      signInForm('Your credential was refused; sign in again.');
    } else {
      main.replaceChildren(errorPanel(e));
    }
  }
}

window.addEventListener('hashchange', async () => {
  if (!(session.open || session.token)) return;
  await route();
  // A new page: screen readers and keyboard users start at its content, not the old link.
  if (!main.contains(document.activeElement)) main.focus({ preventScroll: true });
});

start();
