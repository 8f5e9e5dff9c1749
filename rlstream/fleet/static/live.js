// rlstream live pages: sort, filter, compare picks, and live refresh.
// Polls /api/version with If-None-Match every data-refresh seconds, one request at
// a time; when the version changes, fetches this page's <main> (?fragment=1) and
// swaps it in, keeping the sort, the filters and the picks, and what the reader was
// doing inside <main>: a field typed in or a choice changed but not submitted, the
// focus and caret, a folded part opened and a scroll box scrolled (data-keep).
(function () {
  "use strict";
  var body = document.body;
  var etag = body.getAttribute("data-etag") || "";
  var refresh = Math.max(Number(body.getAttribute("data-refresh")) || 2, 0.2) * 1000;
  var sort = null; // [table id, column index, ascending]
  var picked = {};

  function cellValue(row, i) {
    var c = row.cells[i];
    return c ? c.getAttribute("data-v") : "";
  }

  function applySort() {
    if (!sort) { return; }
    var table = document.getElementById(sort[0]);
    if (!table || !table.tBodies[0]) { return; }
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, sort[1]), y = cellValue(b, sort[1]);
      if (x === null) { x = ""; }
      if (y === null) { y = ""; }
      if (x === "" || y === "") { return (x === "") - (y === ""); }
      var nx = Number(x), ny = Number(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return sort[2] ? c : -c;
    });
    rows.forEach(function (r) { table.tBodies[0].appendChild(r); });
  }

  function value(id) {
    var el = document.getElementById(id);
    return el ? el.value : "";
  }

  function applyFilters() {
    var table = document.getElementById("fleet");
    if (!table || !table.tBodies[0]) { return; }
    var status = value("f-status"), cohort = value("f-cohort"), format = value("f-format");
    var text = value("f-text").toLowerCase();
    var shown = 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      var ok = (!status || r.getAttribute("data-status") === status) &&
        (!cohort || r.getAttribute("data-cohort") === cohort) &&
        (!format || r.getAttribute("data-format") === format) &&
        (!text || (r.getAttribute("data-text") || "").indexOf(text) >= 0);
      r.hidden = !ok;
      if (ok) { shown += 1; }
    });
    table.setAttribute("data-shown", String(shown));
  }

  function applyPicks() {
    var ids = [];
    document.querySelectorAll("input.pick").forEach(function (box) {
      box.checked = !!picked[box.value];
      if (box.checked) { ids.push(box.value); }
    });
    var link = document.getElementById("compare-link");
    if (link) {
      link.href = "/compare?" + ids.map(function (i) {
        return "id=" + encodeURIComponent(i);
      }).join("&");
    }
  }

  function wire() {
    document.querySelectorAll("table.sortable").forEach(function (table) {
      table.querySelectorAll("th").forEach(function (th, i) {
        th.addEventListener("click", function () {
          var asc = !(sort && sort[0] === table.id && sort[1] === i && sort[2]);
          sort = [table.id, i, asc];
          applySort();
        });
      });
    });
    document.querySelectorAll("input.pick").forEach(function (box) {
      box.addEventListener("change", function () {
        if (box.checked) { picked[box.value] = true; } else { delete picked[box.value]; }
        applyPicks();
      });
    });
    tickAges();
    applySort();
    applyFilters();
    applyPicks();
  }

  ["f-status", "f-cohort", "f-format", "f-text"].forEach(function (id) {
    var el = document.getElementById(id);
    if (el) { el.addEventListener("input", applyFilters); }
  });

  // Ages (data-epoch: unix seconds) count on between versions: a page is rendered once
  // per version, and an idle or dead watch makes none. `skew`: the server's clock
  // (its Date header) minus this browser's.
  var skew = 0;

  function fmtAge(s) {
    s = Math.max(s, 0);
    if (s < 120) { return Math.round(s) + "s"; }
    if (s < 7200) { return Math.round(s / 60) + "m"; }
    if (s < 172800) { return Math.round(s / 3600) + "h"; }
    return Math.round(s / 86400) + "d";
  }

  function tickAges() {
    var now = Date.now() / 1000 + skew;
    document.querySelectorAll("[data-epoch]").forEach(function (el) {
      var age = now - Number(el.getAttribute("data-epoch"));
      el.textContent = fmtAge(age);
      if (el.hasAttribute("data-v")) { el.setAttribute("data-v", age.toFixed(1)); }
    });
  }

  function isEdited(el) {
    if (el.tagName === "SELECT") {
      var d = 0;
      Array.prototype.forEach.call(el.options, function (o, i) { if (o.defaultSelected) { d = i; } });
      return el.selectedIndex !== d;
    }
    return el.type !== "checkbox" && el.value !== el.defaultValue;
  }

  function keepState(main) {
    var st = { fields: {}, open: {}, scroll: {}, focus: null };
    main.querySelectorAll("input[id], select[id], textarea[id]").forEach(function (el) {
      if (isEdited(el)) { st.fields[el.id] = el.value; }
    });
    main.querySelectorAll("[data-keep]").forEach(function (el) {
      var k = el.getAttribute("data-keep");
      if (el.tagName === "DETAILS") { st.open[k] = el.open; }
      if (el.scrollTop) { st.scroll[k] = el.scrollTop; }
    });
    var a = document.activeElement;
    if (a && a.id && main.contains(a)) {
      st.focus = [a.id, a.selectionStart, a.selectionEnd];
    }
    return st;
  }

  function restoreState(main, st) {
    Object.keys(st.fields).forEach(function (id) {
      var el = document.getElementById(id);
      if (el && main.contains(el)) { el.value = st.fields[id]; }
    });
    main.querySelectorAll("[data-keep]").forEach(function (el) {
      var k = el.getAttribute("data-keep");
      if (el.tagName === "DETAILS" && k in st.open) { el.open = st.open[k]; }
      if (k in st.scroll) { el.scrollTop = st.scroll[k]; }
    });
    if (st.focus) {
      var f = document.getElementById(st.focus[0]);
      if (f && main.contains(f)) {
        f.focus({ preventScroll: true });
        if (typeof st.focus[1] === "number" && f.setSelectionRange) {
          try { f.setSelectionRange(st.focus[1], st.focus[2]); } catch (e) { /* not a text field */ }
        }
      }
    }
  }

  // An excerpt holding a search hit opens at its first hit (unless the reader had
  // scrolled it): the hit may be far into an 8 KiB text.
  function showMarks(main, scrolled) {
    main.querySelectorAll(".excerpt").forEach(function (x) {
      var k = x.getAttribute("data-keep");
      var m = x.querySelector("mark");
      if (!m || (k && k in scrolled)) { return; }
      x.scrollTop += m.getBoundingClientRect().top - x.getBoundingClientRect().top - 24;
    });
  }

  function fragmentUrl() {
    var q = location.search ? location.search + "&" : "?";
    return location.pathname + q + "fragment=1";
  }

  function poll() {
    fetch("/api/version", { headers: { "If-None-Match": etag }, cache: "no-store" })
      .then(function (r) {
        var date = Date.parse(r.headers.get("Date") || "");
        if (!isNaN(date)) { skew = (date - Date.now()) / 1000; }
        if (r.status === 304) { return null; }
        if (!r.ok) { throw new Error("version " + r.status); }
        return r.json();
      })
      .then(function (doc) {
        if (!doc || doc.etag === etag) { return null; }
        return fetch(fragmentUrl(), { cache: "no-store" }).then(function (r) {
          if (!r.ok) { throw new Error("page " + r.status); }
          return r.text().then(function (html) {
            var main = document.querySelector("main");
            var st = keepState(main);
            main.innerHTML = html;
            restoreState(main, st);
            showMarks(main, st.scroll);
            etag = doc.etag;
            body.setAttribute("data-etag", etag);
            body.setAttribute("data-updates", String(Number(body.getAttribute("data-updates") || 0) + 1));
            wire();
          });
        });
      })
      .then(function () { document.getElementById("live").textContent = "live"; })
      .catch(function () { document.getElementById("live").textContent = "offline, retrying"; })
      .then(function () {
        tickAges();
        setTimeout(poll, refresh);
      });
  }

  wire();
  showMarks(document.querySelector("main") || body, {});
  body.setAttribute("data-ready", "1");
  if (etag) { setTimeout(poll, refresh); }
})();
