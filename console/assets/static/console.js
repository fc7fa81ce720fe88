// The console's live view: every second, while the page is visible, the page's content is
// fetched again from the same address (the server renders it) and replaced when it
// changed. Nothing is loaded from elsewhere; without this script the pages work the same,
// and a reload shows what is new.
(function () {
  "use strict";
  var main = document.getElementById("main");
  if (!main || main.dataset.live !== "1") { return; }
  var busy = false, last = main.innerHTML;
  function editing() {
    var a = document.activeElement;
    return a && main.contains(a) && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT");
  }
  function open() { return main.querySelector("details[open]") !== null; }
  function tick() {
    if (busy || document.hidden || editing() || open()) { return; }
    busy = true;
    fetch(location.pathname + location.search, { headers: { "X-Console-Partial": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== last && !editing()) {
          main.innerHTML = html;
          last = html;
          document.documentElement.dataset.refreshed = String(Date.now());
        }
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }
  setInterval(tick, 1000);
})();
