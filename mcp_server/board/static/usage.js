// Tokens and cost per project per day, with uPlot (vendored).
(function () {
  "use strict";
  var holder = document.getElementById("usage-chart");
  var usage = JSON.parse(holder.dataset.usage);
  var names = Object.keys(usage.series);
  if (!usage.x.length) { holder.textContent = "No usage recorded yet."; return; }
  var palette = ["#2f6fed", "#f0a500", "#1c7c4a", "#b3261e", "#9b59b6", "#16a2b8", "#6b7385"];
  var width = Math.min(holder.clientWidth || 900, 1100);

  function chart(title, key, label) {
    var series = [{}].concat(names.map(function (name, i) {
      return {label: name, stroke: palette[i % palette.length], width: 2, points: {show: true}};
    }));
    var rows = [usage.x].concat(names.map(function (name) { return usage.series[name][key]; }));
    var box = document.createElement("div");
    holder.appendChild(box);
    new uPlot({title: title, width: width, height: 260, series: series, axes: [{}, {label: label, size: 70}]},
              rows, box);
  }

  chart("Tokens per day", "tokens", "tokens");
  chart("Cost per day (USD)", "cost", "USD");
})();
