// Tokens per project per day, with uPlot (vendored).
(function () {
  "use strict";
  var holder = document.getElementById("usage-chart");
  var usage = JSON.parse(holder.dataset.usage);
  var names = Object.keys(usage.series);
  if (!usage.x.length) { holder.textContent = "No usage recorded yet."; return; }
  var palette = ["#2f6fed", "#f0a500", "#1c7c4a", "#b3261e", "#9b59b6", "#16a2b8", "#6b7385"];
  var series = [{}].concat(names.map(function (name, i) {
    return {label: name, stroke: palette[i % palette.length], width: 2, points: {show: true}};
  }));
  var rows = [usage.x].concat(names.map(function (name) { return usage.series[name].tokens; }));
  new uPlot({title: "Tokens per day", width: Math.min(holder.clientWidth || 900, 1100), height: 320,
             series: series, axes: [{}, {label: "tokens", size: 70}]}, rows, holder);
})();
