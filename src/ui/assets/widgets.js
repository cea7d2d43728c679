// The pages' building blocks: the DOM helper (text is always a text node: no HTML is
// ever parsed from data), the confirmation dialog, progress bars, state badges, the
// throughput chart, and how times, durations and counts are written.

export const KINDS = ['delete', 'export', 'import', 'rebuild_vector', 'retention', 'inference'];
export const STATES = ['queued', 'running', 'succeeded', 'failed', 'cancelled'];
export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setAttributes(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'on') {
      for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    } else if (key === 'value' || key === 'checked' || key === 'selected') {
      node[key] = value;
    } else {
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
  return node;
}

/**
 * `el('button', {class: 'danger', on: {click}}, 'Cancel operation')`: an element with
 * attributes (`on`: event listeners; `value`/`checked`/`selected`: properties) and
 * children (strings become text nodes; arrays are flattened; null/false are skipped).
 */
export function el(tag, attrs, ...children) {
  return append(setAttributes(document.createElement(tag), attrs), children);
}

/** The same for SVG elements (the charts). */
export function svg(tag, attrs, ...children) {
  return append(setAttributes(document.createElementNS('http://www.w3.org/2000/svg', tag), attrs), children);
}

/**
 * Ask before doing something that destroys: a modal <dialog> named by its text, with the
 * buttons "Confirm" and "Back" (Escape is Back). Resolves true only for Confirm.
 */
export function confirm(text, detail) {
  return new Promise((resolve) => {
    const heading = el('h2', { id: 'confirm-title' }, text);
    const dialog = el(
      'dialog',
      { class: 'confirm', 'aria-labelledby': 'confirm-title' },
      heading,
      detail ? el('p', {}, detail) : null,
      el(
        'div',
        { class: 'actions' },
        el('button', { type: 'button', class: 'danger', value: 'confirm', on: { click: () => dialog.close('confirm') } }, 'Confirm'),
        el('button', { type: 'button', value: 'back', autofocus: true, on: { click: () => dialog.close('back') } }, 'Back'),
      ),
    );
    const opener = document.activeElement;
    dialog.addEventListener('close', () => {
      dialog.remove();
      if (opener && opener.isConnected) opener.focus();
      resolve(dialog.returnValue === 'confirm');
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** A progress bar for an operation: `role=progressbar`, its values, and the phase. */
export function progressBar(op, name = 'Progress') {
  const bar = el('div', { class: 'progress', role: 'progressbar', 'aria-label': name, 'aria-valuemin': 0 });
  const fill = el('div', { class: 'fill' });
  const label = el('span', { class: 'progress-text' });
  bar.append(fill);
  const box = el('div', { class: 'progress-box' }, bar, label);
  box.update = (o) => updateProgress(bar, fill, label, o);
  box.update(op);
  return box;
}

function updateProgress(bar, fill, label, op) {
  const total = op.total || 0;
  const done = op.state === 'succeeded';
  const pct = total > 0 ? Math.min(100, Math.round((op.processed / total) * 100)) : done ? 100 : 0;
  bar.setAttribute('aria-valuemax', 100);
  bar.setAttribute('aria-valuenow', pct);
  const counts = total > 0 ? `${fmtCount(op.processed)} / ${fmtCount(total)}` : '';
  const text = [`${pct} %`, counts, op.phase].filter(Boolean).join(' · ');
  bar.setAttribute('aria-valuetext', text);
  bar.dataset.state = op.state;
  // CSSOM, not a style attribute: allowed under the page's Content-Security-Policy.
  fill.style.width = `${pct}%`;
  label.textContent = text;
}

/** A state as a badge (its text is the state: color is never the only sign). */
export function stateBadge(state) {
  return el('span', { class: `badge state-${state}` }, state);
}

/**
 * Operations finished per minute as a small bar chart (inline SVG, oldest first), with a
 * text alternative giving the total and the busiest minute.
 */
export function throughputChart(perMinute, label) {
  const values = perMinute.length ? perMinute : [0];
  const width = 180;
  const height = 36;
  const max = Math.max(1, ...values);
  const step = width / values.length;
  const total = values.reduce((a, b) => a + b, 0);
  const summary = `${label}: ${fmtCount(total)} finished in the last ${values.length} minutes, at most ${fmtCount(Math.max(...values))} a minute`;
  const chart = svg(
    'svg',
    { class: 'chart', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': summary },
    svg('title', {}, summary),
    svg('line', { class: 'axis', x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5 }),
    values.map((v, i) => {
      const h = v === 0 ? 0 : Math.max(1, (v / max) * (height - 2));
      return svg('rect', { class: 'bar', x: (i * step).toFixed(2), y: (height - h).toFixed(2), width: Math.max(1, step - 0.6).toFixed(2), height: h.toFixed(2) });
    }),
  );
  return chart;
}

const number = new Intl.NumberFormat('en');

export function fmtCount(n) {
  return n === null || n === undefined ? '—' : number.format(n);
}

/** A duration in milliseconds, short: 850 ms, 12.3 s, 4 min 5 s, 2 h 10 min. */
export function fmtDuration(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** An instant (epoch ms) as local date and time, with seconds. */
export function fmtTime(ms) {
  if (!ms) return '—';
  return new Date(ms).toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

/** A <time> element for an instant. */
export function time(ms) {
  return ms ? el('time', { datetime: new Date(ms).toISOString() }, fmtTime(ms)) : '—';
}

/** A definition list from `[term, value]` pairs (values may be nodes). */
export function facts(pairs) {
  return el('dl', { class: 'facts' }, pairs.filter(Boolean).map(([term, value]) => [el('dt', {}, term), el('dd', {}, value)]));
}

/** A call that coalesces: runs `fn` at most once per `ms`, the last request always served. */
export function throttle(fn, ms) {
  let timer = null;
  let pending = false;
  return () => {
    if (timer) {
      pending = true;
      return;
    }
    fn();
    timer = setTimeout(function again() {
      timer = null;
      if (pending) {
        pending = false;
        fn();
        timer = setTimeout(again, ms);
      }
    }, ms);
  };
}

// A one-field form that opens `#/{route}/{the id typed}`: the by-id boxes of the browse
// pages. `value` pre-fills it.
export function openByIdForm({ id, name, label, formLabel, button, route, value = '' }) {
  const box = el('input', { id, name, required: true, autocomplete: 'off', value });
  const open = (e) => {
    e.preventDefault();
    if (box.value.trim()) location.hash = `#/${route}/${encodeURIComponent(box.value.trim())}`;
  };
  return el(
    'form',
    { class: 'panel row', 'aria-label': formLabel, on: { submit: open } },
    el('div', { class: 'field' }, el('label', { for: id }, label), box),
    el('button', { type: 'submit' }, button),
  );
}
