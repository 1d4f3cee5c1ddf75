// Tokens and cost per project per day, with uPlot (vendored).
(function () {
  "use strict";
  var DAY = 86400;
  var holder = document.getElementById("usage-chart");
  var usage = JSON.parse(holder.dataset.usage);
  var names = Object.keys(usage.series);
  if (!usage.x.length) { holder.textContent = "No usage recorded yet."; return; }
  var palette = ["#2f6fed", "#f0a500", "#1c7c4a", "#b3261e", "#9b59b6", "#16a2b8", "#6b7385"];
  var width = Math.min(holder.clientWidth || 900, 1100);
  var months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

  // The x axis spans the data's days plus one on each side (one day of data alone would span years), in
  // whole days, labelled as days in UTC (the ledger's days are UTC dates).
  // From the data itself: uPlot widens a single point's range on its own before asking.
  var first = Math.min.apply(null, usage.x), last = Math.max.apply(null, usage.x);
  function dayRange() { return [first - DAY, last + DAY]; }
  function dayLabels(u, splits) {
    return splits.map(function (s) { var d = new Date(s * 1000); return months[d.getUTCMonth()] + " " + d.getUTCDate(); });
  }
  function daySplits(u, axis, min, max, incr) {
    var step = Math.max(DAY, Math.ceil(incr / DAY) * DAY), first = Math.ceil(min / DAY) * DAY, out = [];
    for (var s = first; s <= max; s += step) out.push(s);
    return out;
  }

  // The labels the axis drew, kept on the chart (data-days) for tests and anyone inspecting it.
  function drawnLabels(u, splits) { var labels = dayLabels(u, splits); u.root.dataset.days = labels.join(","); return labels; }

  var charts = [];
  function chart(title, key, label) {
    var series = [{label: "day", value: function (u, s) { return s == null ? "" : dayLabels(u, [s])[0]; }}]
      .concat(names.map(function (name, i) {
        return {label: name, stroke: palette[i % palette.length], width: 2, points: {show: true}};
      }));
    var rows = [usage.x].concat(names.map(function (name) { return usage.series[name][key]; }));
    var box = document.createElement("div");
    holder.appendChild(box);
    var plot = new uPlot({title: title, width: width, height: 260, series: series,
                          scales: {x: {time: true, range: dayRange}},
                          axes: [{incrs: [DAY, 2 * DAY, 7 * DAY, 14 * DAY, 28 * DAY], splits: daySplits, values: drawnLabels},
                                 {label: label, size: 70}]},
                         rows, box);
    charts.push(plot);
  }

  chart("Tokens per day", "tokens", "tokens");
  chart("Cost per day (USD)", "cost", "USD");
  window.usageCharts = charts;  // tests and curious people can read the scales
})();
