// ---- errors: every script error, failed fetch or bad datum is listed in #page-errors ----
// (cmake/embed_page.cmake puts this before the script of every embedded page)
'use strict';  // first, so that the whole page script stays strict

function reportError(message) {
  const list = document.getElementById('page-errors');
  const item = document.createElement('li');
  item.textContent = message;
  list.appendChild(item);
  list.dataset.count = String(list.children.length);
}
window.addEventListener('error', (e) => reportError('script error: ' + (e.message || e.type)));
window.addEventListener('unhandledrejection', (e) => reportError('unhandled rejection: ' + (e.reason && e.reason.message ? e.reason.message : String(e.reason))));
