// ---- errors: every script error, failed fetch or bad datum is listed in #page-errors ----
// (cmake/embed_page.cmake puts this before the script of every embedded page)
'use strict';  // first, so that the whole page script stays strict

// data-count counts every error; the list keeps the last 50 (a page left open on a server that is
// down fails three fetches every two seconds).
function reportError(message) {
  const list = document.getElementById('page-errors');
  const item = document.createElement('li');
  item.textContent = message;
  list.appendChild(item);
  while (list.children.length > 50) list.removeChild(list.firstChild);
  list.dataset.count = String(Number(list.dataset.count || 0) + 1);
}
window.addEventListener('error', (e) => reportError('script error: ' + (e.message || e.type)));
window.addEventListener('unhandledrejection', (e) => reportError('unhandled rejection: ' + (e.reason && e.reason.message ? e.reason.message : String(e.reason))));
