// The console's live view: every second, while the page is visible, the page's content is
// fetched again from the same address (the server renders it) and replaced when it
// changed. Nothing is loaded from elsewhere; without this script the pages work the same,
// and a reload shows what is new.
//
// This script builds no markup from data: the only HTML it inserts is the server's own
// rendering of this page, in which html/template escaped every record's text. It goes
// through one Trusted Types policy, and the Content-Security-Policy requires Trusted
// Types, so no other path of any script can write markup into the page.
(function () {
  "use strict";
  var main = document.getElementById("main");
  if (!main || main.dataset.live !== "1") { return; }
  var pass = function (s) { return s; };
  var policy = window.trustedTypes ? window.trustedTypes.createPolicy("console", { createHTML: pass }) : { createHTML: pass };
  var busy = false, last = null;
  function editing() {
    var a = document.activeElement;
    return a && main.contains(a) && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT");
  }
  function open() { return main.querySelector("details[open]") !== null; }
  function replace(html) {
    var doc = new DOMParser().parseFromString(policy.createHTML(html), "text/html");
    main.replaceChildren.apply(main, Array.prototype.slice.call(doc.body.childNodes));
  }
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
          replace(html);
          last = html;
          document.documentElement.dataset.refreshed = String(Date.now());
        }
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }
  setInterval(tick, 1000);
})();
