// Refreshes an operator page in place: on each server-sent "refresh" (data-live="sse") or every
// interval (data-live="poll"), fetch this page again and swap its <main> and <footer>. Stops
// while the tab is hidden, catches up once when it shows. window.ekbatanLive.state says which.
(function () {
  "use strict";
  var body = document.body;
  var mode = body.dataset.live;
  if (!mode || mode === "off") return;
  var interval = Number(body.dataset.liveInterval || "5") * 1000;
  var live = { state: "starting", refreshes: 0 };
  window.ekbatanLive = live;
  var source = null, timer = null, busy = false;
  var badge = document.getElementById("live-state");

  function show(state) {
    live.state = state;
    if (badge) {
      badge.textContent = state === "paused" ? "live: paused" : "live";
      badge.dataset.state = state;
    }
  }

  function busyReading() {
    // never swap a form away under the operator's hands, nor text they are selecting
    var active = document.activeElement;
    if (active && active.closest("main") && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) return true;
    var selection = window.getSelection && window.getSelection();
    return !!(selection && !selection.isCollapsed && selection.anchorNode &&
      document.querySelector("main").contains(selection.anchorNode));
  }

  function openedDetails() {
    // what the operator unfolded (a traceback) stays unfolded in the fresh page
    return Array.prototype.map.call(document.querySelectorAll("main details[open][id]"), function (d) { return d.id; });
  }

  function refresh() {
    if (busy || document.hidden || busyReading()) return;
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Ekbatan-Live": "1" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null) return;  // gone (a finished execution) or refused: keep what is shown
        var fresh = new DOMParser().parseFromString(text, "text/html");
        openedDetails().forEach(function (id) {
          var again = fresh.getElementById(id);
          if (again && again.tagName === "DETAILS") again.open = true;
        });
        ["main", "footer"].forEach(function (tag) {
          var now = document.querySelector(tag), next = fresh.querySelector(tag);
          if (now && next) now.replaceWith(next);
        });
        live.refreshes += 1;
      })
      .catch(function () { /* the next refresh tries again */ })
      .then(function () { busy = false; });
  }

  function start() {
    if (mode === "sse" && window.EventSource) {
      source = new EventSource(body.dataset.liveUrl);
      source.addEventListener("refresh", refresh);
      show("sse");
    } else {
      timer = window.setInterval(refresh, interval);
      show("poll");
    }
  }

  function stop() {
    if (source) { source.close(); source = null; }
    if (timer) { window.clearInterval(timer); timer = null; }
    show("paused");
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { stop(); } else { refresh(); start(); }
  });
  if (document.hidden) { show("paused"); } else { start(); }
})();
