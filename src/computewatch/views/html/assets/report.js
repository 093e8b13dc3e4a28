/* computewatch report: draws the charts of the embedded data with uPlot.
   Every chart shares the wall-clock x axis: hovering one moves the cursor on all, and a drag
   zoom on one zooms all (double-click zooms back out). */
(function () {
  "use strict";

  var data = JSON.parse(document.getElementById("cw-data").textContent);
  var PALETTE = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#0598bc",
    "#bf3989", "#4d2d00", "#6e7781", "#116329"];

  function alpha(hex, a) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + a + ")";
  }

  function sig(v, digits) {
    if (v === 0) { return "0"; }
    var a = Math.abs(v);
    if (a >= 1000) { return Math.round(v).toLocaleString("en-US"); }
    return Number(v.toPrecision(digits)).toString();
  }

  var BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function bytes(v) {
    var a = Math.abs(v), i = 0;
    while (a >= 1024 && i < BYTE_UNITS.length - 1) { a /= 1024; i++; }
    var text = i === 0 ? sig(a, 3) : (a < 99.95 ? a.toFixed(1) : a.toFixed(0));
    return (v < 0 ? "-" : "") + text + " " + BYTE_UNITS[i];
  }
  function seconds(v) {
    var a = Math.abs(v);
    if (a === 0) { return "0 s"; }
    if (a < 1e-3) { return sig(v * 1e6, 3) + " µs"; }
    if (a < 1) { return sig(v * 1e3, 3) + " ms"; }
    return sig(v, 3) + " s";
  }
  function perSecond(v) {
    var a = Math.abs(v);
    if (a >= 1e9) { return sig(v / 1e9, 3) + " G/s"; }
    if (a >= 1e6) { return sig(v / 1e6, 3) + " M/s"; }
    if (a >= 1e4) { return sig(v / 1e3, 3) + " k/s"; }
    return sig(v, 3) + "/s";
  }
  var FORMAT = {
    ratio: function (v) { return sig(v * 100, 3) + "%"; },
    bytes: bytes,
    bytes_per_second: function (v) { return bytes(v) + "/s"; },
    watts: function (v) { return sig(v, 3) + " W"; },
    per_second: perSecond,
    seconds: seconds
  };

  var charts = [];
  var zooming = false;
  var cursorSync = uPlot.sync("computewatch");

  function onZoom(u, key) {
    if (key !== "x" || zooming) { return; }
    var min = u.scales.x.min, max = u.scales.x.max;
    if (min == null || max == null) { return; }
    zooming = true;
    try {
      charts.forEach(function (c) {
        if (c.plot !== u) { c.plot.setScale("x", { min: min, max: max }); }
      });
    } finally {
      zooming = false;
    }
  }

  function yRange(unit) {
    return function (u, min, max) {
      if (min == null || max == null) { return [0, 1]; }
      var lo = Math.min(0, min);
      var hi = max;
      if (unit === "ratio") { hi = Math.max(hi, 1); }
      if (hi <= lo) { hi = lo + 1; }
      return [lo, hi + (hi - lo) * 0.04];
    };
  }

  function makeChart(spec, fig) {
    var fmt = FORMAT[spec.unit] || function (v) { return sig(v, 4); };
    var cols = [data.grids[spec.grid]];
    var series = [{ label: "time" }];
    var bands = [];
    spec.series.forEach(function (s, i) {
      var color = PALETTE[i % PALETTE.length];
      var meanIdx = cols.length;
      cols.push(s.mean);
      var banded = Array.isArray(s.lo) && Array.isArray(s.hi);
      series.push({
        label: s.label,
        stroke: color,
        width: 1.5,
        spanGaps: false,
        value: function (u, v, sidx, idx) {
          if (v == null) { return "–"; }
          var text = fmt(v);
          if (banded && idx != null && s.lo[idx] != null && s.hi[idx] != null &&
              s.lo[idx] !== s.hi[idx]) {
            text += " (" + fmt(s.lo[idx]) + " – " + fmt(s.hi[idx]) + ")";
          }
          return text;
        }
      });
      if (banded) {
        cols.push(s.hi, s.lo);
        var edge = { stroke: alpha(color, 0.35), width: 0.5, class: "cw-band",
          points: { show: false }, value: function () { return ""; } };
        series.push(Object.assign({ label: s.label + " max" }, edge));
        series.push(Object.assign({ label: s.label + " min" }, edge));
        bands.push({ series: [meanIdx + 1, meanIdx + 2], fill: alpha(color, 0.16) });
        series[meanIdx].bandOf = [meanIdx + 1, meanIdx + 2];
      }
    });
    var el = fig.querySelector(".plot");
    var opts = {
      width: Math.max(el.clientWidth, 300),
      height: 220,
      series: series,
      bands: bands,
      scales: { x: { time: true }, y: { range: yRange(spec.unit) } },
      axes: [
        { stroke: "#59636e", space: 80, grid: { stroke: "#eaeef2" }, ticks: { stroke: "#d1d9e0" } },
        {
          stroke: "#59636e",
          size: function (u, values, axisIdx, cycleNum) {
            // Wide enough for the longest label, measured in the axis font (as uPlot's
            // axis-autosize demo does); the default width cuts "97.7 KiB/s".
            var axis = u.axes[axisIdx];
            if (cycleNum > 1) { return axis._size; }
            var size = axis.ticks.size + axis.gap;
            var longest = (values || []).reduce(function (a, b) {
              return String(b).length > a.length ? String(b) : a;
            }, "");
            if (longest !== "") {
              u.ctx.font = axis.font[0];
              size += u.ctx.measureText(longest).width / uPlot.pxRatio;
            }
            return Math.ceil(size) + 8;
          },
          grid: { stroke: "#eaeef2" },
          ticks: { stroke: "#d1d9e0" },
          values: function (u, splits) { return splits.map(fmt); }
        }
      ],
      cursor: {
        sync: { key: cursorSync.key, setSeries: false },
        drag: { x: true, y: false, setScale: true }
      },
      legend: { live: true },
      hooks: {
        setScale: [onZoom],
        setSeries: [function (u, sidx, opts) {
          // Hiding a series from its legend entry hides its band too.
          var edges = sidx != null && u.series[sidx] && u.series[sidx].bandOf;
          if (edges && opts && typeof opts.show === "boolean") {
            edges.forEach(function (e) { u.setSeries(e, { show: opts.show }, false); });
          }
        }]
      }
    };
    var plot = new uPlot(opts, cols, el);
    charts.push({ id: spec.id, plot: plot, element: fig });
  }

  data.charts.forEach(function (spec) {
    var fig = document.getElementById("chart-" + spec.id);
    if (fig) { makeChart(spec, fig); }
  });

  var pending = null;
  function resize() {
    charts.forEach(function (c) {
      var el = c.element.querySelector(".plot");
      c.plot.setSize({ width: Math.max(el.clientWidth, 300), height: 220 });
    });
  }
  window.addEventListener("resize", function () {
    if (pending) { clearTimeout(pending); }
    pending = setTimeout(resize, 100);
  });
  window.addEventListener("beforeprint", resize);

  // For tests and for the curious: the uPlot instance of every chart, and when they were drawn
  // (milliseconds since the navigation started).
  window.computewatchCharts = charts;
  window.computewatchDrawnAt = performance.now();
})();
