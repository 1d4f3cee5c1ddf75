// The board's live parts: one EventSource per page; htmx does the fetching and swapping.
(function () {
  "use strict";
  var body = document.body;
  var feedUrl = body.dataset.feed;
  var live = document.getElementById("live");

  // Every action carries the session's CSRF token, which only the login answer holds (auth.py says why):
  // read at each request, so a login in another tab is followed.
  body.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-CSRF-Token"] = localStorage.getItem("agentqueue.csrf") || "";
  });

  // Changes come in bursts (READY→ASSIGNED→IN_PROGRESS in a few ms): one fetch at a time per thing,
  // and one more after it if something changed meanwhile, so the last state always wins.
  function coalesced(run) {
    var busy = false, again = false;
    return function trigger() {
      if (busy) { again = true; return; }
      busy = true;
      Promise.resolve(run()).catch(function () {}).then(function () {
        busy = false;
        if (again) { again = false; trigger(); }
      });
    };
  }

  // -- the kanban: cards move between columns, dependency links are drawn between them ----------
  function kanban() { return document.getElementById("kanban"); }

  function filtered(card) {
    var board = kanban(), q = (board.dataset.query || "").toLowerCase(), agent = board.dataset.agent || "";
    if (agent && card.dataset.agent !== agent) return true;
    if (q && card.textContent.toLowerCase().indexOf(q) < 0) return true;
    return false;
  }

  // `totals`: the project's count per column (the card's X-Column-Totals), or null. A long column shows its
  // first cards only; the rest are counted in its data-hidden, kept right from the totals when unfiltered.
  function placeCard(html, taskId, totals) {
    var board = kanban();
    var old = document.getElementById("card-" + taskId);
    var holder = document.createElement("div");
    holder.innerHTML = html.trim();
    var card = holder.firstElementChild;
    var column = card && board.querySelector('.column[data-column="' + card.dataset.column + '"] .cards');
    if (!card || filtered(card) || !column) { if (old) old.remove(); countColumns(totals); drawLinks(); return; }
    if (old && old.dataset.column === card.dataset.column) { old.replaceWith(card); }
    else { if (old) old.remove(); column.prepend(card); card.classList.add("moved"); }
    htmx.process(card);
    countColumns(totals);
    drawLinks();
  }

  function countColumns(totals) {
    var board = kanban();
    if (!board) return;
    var exact = totals && !board.dataset.query && !board.dataset.agent, shown = 0;
    board.querySelectorAll(".column").forEach(function (column) {
      var cards = column.querySelectorAll(".card").length, name = column.dataset.column;
      if (exact && typeof totals[name] === "number") column.dataset.hidden = Math.max(0, totals[name] - cards);
      var count = cards + (parseInt(column.dataset.hidden, 10) || 0);
      column.querySelector(".count").textContent = count;
      shown += count;
    });
    var counter = document.getElementById("shown-count");
    if (counter) counter.textContent = shown;
  }

  function drawLinks() {
    var board = kanban();
    if (!board) return;
    var svg = document.getElementById("links"), origin = board.getBoundingClientRect(), paths = [];
    board.querySelectorAll(".card[data-deps]").forEach(function (card) {
      if (!card.dataset.deps) return;
      var to = card.getBoundingClientRect();
      card.dataset.deps.split(",").forEach(function (dep) {
        var from = document.getElementById("card-" + dep);
        if (!from) return;
        var a = from.getBoundingClientRect();
        var x1 = a.right - origin.left, y1 = a.top + a.height / 2 - origin.top;
        var x2 = to.left - origin.left, y2 = to.top + to.height / 2 - origin.top;
        if (x2 < x1) { x1 = a.left - origin.left; x2 = to.right - origin.left; }  // same or earlier column
        var bend = Math.max(30, Math.abs(x2 - x1) / 2) * (x2 >= x1 ? 1 : -1);
        paths.push('<path data-from="' + dep + '" data-to="' + card.dataset.id + '" d="M' + x1 + "," + y1 +
                   " C" + (x1 + bend) + "," + y1 + " " + (x2 - bend) + "," + y2 + " " + x2 + "," + y2 + '"/>');
      });
    });
    svg.innerHTML = paths.join("");
  }

  // A project paused or resumed, the orchestrator paused or resumed: the header's status and buttons follow.
  var refreshState = coalesced(function () { return refresh(location.pathname + location.search, "project-state"); });

  function onKanbanChange(change) {
    if (!change.task_id) {
      if (/^(project|orchestrator)\./.test(change.event_type || "")) refreshState();
      return;
    }
    if (change.event_type === "task.deleted") {
      var gone = document.getElementById("card-" + change.task_id);
      if (gone) gone.remove();
      countColumns(); drawLinks();
      return;
    }
    var id = change.task_id;
    if (!cardFetchers[id]) {
      cardFetchers[id] = coalesced(function () {
        return fetch("/projects/" + kanban().dataset.project + "/cards/" + encodeURIComponent(id),
                     {credentials: "same-origin"})
          .then(function (r) {
            if (!r.ok) return null;
            var totals = null;
            try { totals = JSON.parse(r.headers.get("X-Column-Totals") || "null"); } catch (e) { totals = null; }
            return r.text().then(function (html) { return {html: html, totals: totals}; });
          })
          .then(function (got) { if (got && got.html) placeCard(got.html, id, got.totals); });
      });
    }
    cardFetchers[id]();
  }
  var cardFetchers = {};

  // -- the task page: the panel refreshes, the log grows -------------------------------------------
  // Replace the element `id` with the one of the same id in the page at `url` (htmx wires it up again).
  function refresh(url, id) {
    return fetch(url, {credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { return html === null ? null : idle(document.getElementById(id)).then(function () { return html; }); })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(id);
        var old = document.getElementById(id);
        if (fresh && old) { old.replaceWith(fresh); htmx.process(fresh); }
      });
  }

  // Resolves once no htmx request made from inside `element` is in flight: a button the person just clicked
  // must stay in the page until its answer (the flash) is swapped in, or htmx drops that answer. The change
  // the click made often arrives on the feed before the click's own answer does.
  function idle(element) {
    return new Promise(function (resolve) {
      if (!element || !(element.classList.contains("htmx-request") || element.querySelector(".htmx-request"))) {
        resolve();
        return;
      }
      var settle = function () {
        document.body.removeEventListener("htmx:afterRequest", settle);
        clearTimeout(guard);
        setTimeout(resolve, 0);
      };
      var guard = setTimeout(settle, 10000);
      document.body.addEventListener("htmx:afterRequest", settle);
    });
  }

  var onTaskChange = coalesced(function () {
    // The changes section follows the branch too (a run commits, a landing fixes the range).
    return Promise.all([refresh(location.pathname + "/panel", "panel"), refresh(location.pathname, "diff")]);
  });

  function onLog(data) {
    var log = document.getElementById("log");
    if (!log) return;
    var atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.appendChild(document.createTextNode(data.text));
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  // -- the feed ------------------------------------------------------------------------------------
  // After a daemon restart or falling behind: re-render this page's content in place.
  var resync = coalesced(function () {
    return refresh(location.pathname + location.search, "main").then(function () { countColumns(); drawLinks(); });
  });

  function connect() {
    if (!feedUrl) return;
    var source = new EventSource(feedUrl), lost = false;
    source.onopen = function () { live.classList.add("on"); if (lost) { lost = false; resync(); } };
    source.onerror = function () { live.classList.remove("on"); lost = true; };
    source.addEventListener("resync", resync);
    source.addEventListener("log", function (e) { onLog(JSON.parse(e.data)); });
    source.addEventListener("change", function (e) {
      var change = JSON.parse(e.data);
      if (kanban()) onKanbanChange(change);
      else if (document.getElementById("panel")) onTaskChange();
      else resync();
    });
    window.agentqueueFeed = source;  // tests and curious people can see its state
  }

  // A form whose action succeeded is cleared for the next one (a refusal keeps what was typed).
  document.body.addEventListener("htmx:afterRequest", function (e) {
    var form = e.detail.elt.closest ? e.detail.elt.closest("form") : null;
    if (form && e.detail.successful && e.detail.xhr.responseText.indexOf("flash ok") >= 0) form.reset();
  });
  // -- flash messages: a success clears itself after FLASH_MS, an error
  // stays until the next action; the region keeps its aria-live, so a screen reader still reads each one.
  var FLASH_MS = 8000, flashTimer = null;
  function clearFlash() { var flash = document.getElementById("flash"); if (flash) flash.innerHTML = ""; }
  function clearFlashLater() {
    clearTimeout(flashTimer);
    var flash = document.getElementById("flash");
    if (flash && flash.querySelector(".flash.ok")) flashTimer = setTimeout(clearFlash, FLASH_MS);
  }
  document.body.addEventListener("htmx:beforeRequest", function () { clearTimeout(flashTimer); clearFlash(); });
  document.body.addEventListener("htmx:afterSwap", function (e) {
    if (e.detail.target && e.detail.target.id === "flash") clearFlashLater();
  });

  document.addEventListener("DOMContentLoaded", function () { drawLinks(); connect(); });
  window.addEventListener("resize", drawLinks);
  document.body.addEventListener("htmx:afterSwap", function () { if (kanban()) { countColumns(); drawLinks(); } });
})();
