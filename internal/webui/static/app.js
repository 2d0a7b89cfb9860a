// vmgate web UI: the little the pages need beyond HTML. No framework, no inline
// script (the Content-Security-Policy forbids it).
"use strict";

// A page restored from the back/forward cache may belong to a session that has
// ended (logout): load it again, so the server decides what it shows.
window.addEventListener("pageshow", function (e) {
  if (e.persisted) { window.location.reload(); }
});
