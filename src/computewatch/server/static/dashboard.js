/* computewatch dashboard: live updates and charts.

   Live: one EventSource on the server's run-change feed (<body data-events="URL">). On each
   change, every element marked data-live is asked to refresh itself (htmx "cw-refresh" event,
   which its hx-trigger listens for); one with data-live-run="ID" only for changes of that run.
   Charts: every <script type="application/json" class="cw-charts"> holds chart specs; each is
   drawn with uPlot into the figure of the same id, and drawn again after an htmx swap.
   Clocks: every element with data-since="UNIX SECONDS" shows the time since then as H:MM:SS,
   ticking each second (without script it keeps the server's value at the page's rendering). */
(function () {
  "use strict";

  var PALETTE = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#0598bc",
    "#bf3989", "#4d2d00", "#6e7781", "#116329"];

  function alpha(hex, a) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }
  function sig(v, digits) {
    if (v === 0) { return "0"; }
    if (Math.abs(v) >= 1000) { return Math.round(v).toLocaleString("en-US"); }
    return Number(v.toPrecision(digits)).toString();
  }
  function si(v) {  // 2,000,000 as 2M: axis labels stay short
    var a = Math.abs(v);
    if (a >= 1e9) { return sig(v / 1e9, 3) + "G"; }
    if (a >= 1e6) { return sig(v / 1e6, 3) + "M"; }
    if (a >= 1e4) { return sig(v / 1e3, 3) + "k"; }
    return sig(v, 3);
  }
  var BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function bytes(v) {
    var a = Math.abs(v), i = 0;
    while (a >= 1024 && i < BYTE_UNITS.length - 1) { a /= 1024; i++; }
    var text = i === 0 ? sig(a, 3) : (a < 99.95 ? a.toFixed(1) : a.toFixed(0));
    return (v < 0 ? "-" : "") + text + " " + BYTE_UNITS[i];
  }
  function duration(v) {
    var a = Math.abs(v);
    if (a < 120) { return sig(v, 3) + " s"; }
    if (a < 7200) { return sig(v / 60, 3) + " min"; }
    return sig(v / 3600, 3) + " h";
  }
  var FORMAT = {
    ratio: function (v) { return sig(v * 100, 3) + "%"; },
    bytes: bytes,
    bytes_per_second: function (v) { return bytes(v) + "/s"; },
    watts: function (v) { return sig(v, 3) + " W"; },
    joules: function (v) { return sig(v, 3) + " J"; },
    per_second: function (v) { return si(v) + "/s"; },
    seconds: function (v) { return sig(v, 3) + " s"; },
    celsius: function (v) { return sig(v, 3) + " °C"; },
    cores: function (v) { return sig(v, 3) + " cores"; },
    hertz: function (v) {
      var a = Math.abs(v);
      if (a >= 1e9) { return sig(v / 1e9, 3) + " GHz"; }
      if (a >= 1e6) { return sig(v / 1e6, 3) + " MHz"; }
      return sig(v, 3) + " Hz";
    }
  };

  function clock(seconds) {
    var total = Math.max(0, Math.floor(seconds));
    var h = Math.floor(total / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
    return h + ":" + (m < 10 ? "0" : "") + m + ":" + (s < 10 ? "0" : "") + s;
  }
  function tick() {
    var now = Date.now() / 1000;
    document.querySelectorAll("[data-since]").forEach(function (el) {
      var since = parseFloat(el.getAttribute("data-since"));
      if (isFinite(since)) { el.textContent = clock(now - since); }
    });
  }

  var charts = [];
  window.computewatchCharts = charts;

  function makeChart(spec, fig) {
    var fmt = FORMAT[spec.unit] || function (v) { return sig(v, 4); };
    var cols = [spec.x];
    var series = [spec.time ? { label: "time" } : { label: "elapsed", value: function (u, v) {
      return v == null ? "–" : duration(v);
    } }];
    var bands = [];
    spec.series.forEach(function (s, i) {
      var color = PALETTE[i % PALETTE.length];
      var meanIdx = cols.length;
      cols.push(s.mean);
      series.push({
        label: s.label, stroke: color, width: 1.5, spanGaps: true,
        value: function (u, v) { return v == null ? "–" : fmt(v); }
      });
      if (Array.isArray(s.lo) && Array.isArray(s.hi)) {
        cols.push(s.hi, s.lo);
        var edge = { stroke: alpha(color, 0.35), width: 0.5, class: "cw-band", spanGaps: true,
          points: { show: false }, value: function () { return ""; } };
        series.push(Object.assign({ label: s.label + " max" }, edge));
        series.push(Object.assign({ label: s.label + " min" }, edge));
        bands.push({ series: [meanIdx + 1, meanIdx + 2], fill: alpha(color, 0.16) });
      }
    });
    var el = fig.querySelector(".plot");
    var xAxis = { stroke: "#59636e", space: 80, grid: { stroke: "#eaeef2" } };
    if (!spec.time) { xAxis.values = function (u, splits) { return splits.map(duration); }; }
    var plot = new uPlot({
      width: Math.max(el.clientWidth, 300),
      height: 200,
      series: series,
      bands: bands,
      scales: { x: { time: !!spec.time }, y: { range: function (u, min, max) {
        if (min == null || max == null) { return [0, 1]; }
        var lo = Math.min(0, min), hi = max;
        if (spec.unit === "ratio") { hi = Math.max(hi, 1); }
        if (hi <= lo) { hi = lo + 1; }
        return [lo, hi + (hi - lo) * 0.04];
      } } },
      axes: [xAxis, { stroke: "#59636e", size: 70, grid: { stroke: "#eaeef2" },
        values: function (u, splits) { return splits.map(fmt); } }],
      legend: { live: true }
    }, cols, el);
    charts.push({ id: spec.id, plot: plot, element: fig });
  }

  function drawIn(root) {
    root.querySelectorAll("script.cw-charts").forEach(function (holder) {
      var specs = JSON.parse(holder.textContent);
      specs.forEach(function (spec) {
        var fig = document.getElementById("chart-" + spec.id);
        if (!fig) { return; }
        for (var i = charts.length - 1; i >= 0; i--) {
          if (charts[i].id === spec.id) { charts[i].plot.destroy(); charts.splice(i, 1); }
        }
        fig.querySelector(".plot").textContent = "";
        makeChart(spec, fig);
      });
    });
    window.computewatchDrawnAt = performance.now();
  }

  function connect(url) {
    var source = new EventSource(url, { withCredentials: true });
    window.computewatchEvents = { received: 0, source: source };
    function onChange(ev) {
      var change = {};
      try { change = JSON.parse(ev.data); } catch (e) { change = {}; }
      var runId = change.run_id || change.id || "";
      window.computewatchEvents.received++;
      document.querySelectorAll("[data-live]").forEach(function (el) {
        var only = el.getAttribute("data-live-run");
        if (only && runId && only !== runId) { return; }
        htmx.trigger(el, "cw-refresh", change);
      });
    }
    source.addEventListener("message", onChange);
    source.addEventListener("run", onChange);
    window.addEventListener("pagehide", function () { source.close(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawIn(document);
    tick();
    setInterval(tick, 1000);
    var url = document.body.getAttribute("data-events");
    if (url && window.EventSource) { connect(url); }
    document.body.addEventListener("htmx:beforeSwap", function (ev) {
      // A refresh after the session ended lands on the login form: go there, whole page.
      var xhr = ev.detail.xhr;
      if (xhr && xhr.responseURL && new URL(xhr.responseURL).pathname === "/login") {
        ev.detail.shouldSwap = false;
        window.location.assign("/login?next=" +
          encodeURIComponent(window.location.pathname + window.location.search));
      }
    });
    document.body.addEventListener("htmx:afterSettle", function (ev) {
      drawIn(ev.detail.elt || document);
      tick();
      window.computewatchRefreshed = (window.computewatchRefreshed || 0) + 1;
    });
    var pending = null;
    window.addEventListener("resize", function () {
      if (pending) { clearTimeout(pending); }
      pending = setTimeout(function () {
        charts.forEach(function (c) {
          var el = c.element.querySelector(".plot");
          c.plot.setSize({ width: Math.max(el.clientWidth, 300), height: 200 });
        });
      }, 100);
    });
    // compare: the checkboxes of the runs list make the link
    document.body.addEventListener("change", function (ev) {
      var form = ev.target.closest && ev.target.closest("form.cw-compare");
      if (!form) { return; }
      var ids = Array.prototype.map.call(
        form.querySelectorAll("input[name=run]:checked"), function (c) { return c.value; });
      var button = form.querySelector("button.compare");
      if (button) { button.disabled = ids.length < 2; }
    });
  });
})();
