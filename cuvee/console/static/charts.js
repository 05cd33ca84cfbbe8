// Small SVG charts for the console: no library, no network. Every text is set with textContent (never parsed).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#7b1e3a", "#2f6f9f", "#2f7d4f", "#b7791f", "#6b4fa0", "#9f2f6f", "#3f8f8f", "#8f5f2f"];

function svgNode(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function shortNumber(v) {
  const abs = Math.abs(v);
  if (abs >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (abs >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (abs >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}

function frame(width, height, margin, yMax, yLabel) {
  const svg = svgNode("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  const plotH = height - margin.top - margin.bottom;
  svg.appendChild(svgNode("line", { x1: margin.left, y1: margin.top, x2: margin.left, y2: height - margin.bottom,
                                    stroke: "#bbb" }));
  svg.appendChild(svgNode("line", { x1: margin.left, y1: height - margin.bottom, x2: width - margin.right,
                                    y2: height - margin.bottom, stroke: "#bbb" }));
  for (const f of [0, 0.5, 1]) {
    const y = margin.top + plotH * (1 - f);
    svg.appendChild(svgNode("text", { x: margin.left - 6, y: y + 4, "text-anchor": "end" }, shortNumber(yMax * f)));
  }
  if (yLabel) svg.appendChild(svgNode("text", { x: margin.left, y: margin.top - 6 }, yLabel));
  return svg;
}

// A chart of one numeric series: bars by label, or a line when the labels are numbers (a time series).
function seriesChart(container, labels, values, { yLabel = "", xNumeric = false } = {}) {
  container.replaceChildren();
  const width = 900, height = 300, margin = { top: 22, right: 16, bottom: 46, left: 64 };
  const yMax = Math.max(1e-9, ...values.map((v) => Math.abs(v)));
  const svg = frame(width, height, margin, yMax, yLabel);
  const plotW = width - margin.left - margin.right, plotH = height - margin.top - margin.bottom;
  const y = (v) => margin.top + plotH * (1 - Math.abs(v) / yMax);
  if (xNumeric && labels.length > 1) {
    const xs = labels.map(Number), lo = Math.min(...xs), hi = Math.max(...xs);
    const x = (v) => margin.left + (hi === lo ? plotW / 2 : (plotW * (v - lo)) / (hi - lo));
    const order = xs.map((_, i) => i).sort((a, b) => xs[a] - xs[b]);
    const points = order.map((i) => `${x(xs[i]).toFixed(1)},${y(values[i]).toFixed(1)}`).join(" ");
    svg.appendChild(svgNode("polyline", { points, fill: "none", stroke: PALETTE[0], "stroke-width": 2,
                                          class: "series" }));
    svg.appendChild(svgNode("text", { x: margin.left, y: height - 20 }, shortNumber(lo)));
    svg.appendChild(svgNode("text", { x: width - margin.right, y: height - 20, "text-anchor": "end" }, shortNumber(hi)));
  } else {
    const n = Math.min(labels.length, 60), slot = plotW / Math.max(1, n);
    for (let i = 0; i < n; i++) {
      const top = y(values[i]);
      const bar = svgNode("rect", { x: margin.left + i * slot + slot * 0.1, y: top, width: slot * 0.8,
                                    height: Math.max(0, height - margin.bottom - top), fill: PALETTE[0],
                                    class: "series" });
      bar.appendChild(svgNode("title", {}, `${labels[i]}: ${values[i]}`));
      svg.appendChild(bar);
      if (n <= 30) {
        const label = String(labels[i]).slice(0, 14);
        svg.appendChild(svgNode("text", { x: margin.left + i * slot + slot / 2, y: height - margin.bottom + 14,
                                          "text-anchor": "middle" }, label));
      }
    }
  }
  container.appendChild(svg);
}

// Segment size over time: one point per committed segment (x: commit time, y: bytes), one colour per partition.
function segmentSizePlot(container, points) {
  container.replaceChildren();
  if (!points.length) {
    container.appendChild(Object.assign(document.createElement("p"), { className: "muted",
                                                                        textContent: "No committed segment yet." }));
    return;
  }
  const width = 900, height = 240, margin = { top: 22, right: 16, bottom: 36, left: 64 };
  const plotW = width - margin.left - margin.right, plotH = height - margin.top - margin.bottom;
  const ts = points.map((p) => p.t), lo = Math.min(...ts), hi = Math.max(...ts);
  const yMax = Math.max(1, ...points.map((p) => p.size));
  const svg = frame(width, height, margin, yMax, "segment size (bytes) by commit time");
  const x = (t) => margin.left + (hi === lo ? plotW / 2 : (plotW * (t - lo)) / (hi - lo));
  const y = (v) => margin.top + plotH * (1 - v / yMax);
  for (const p of points) {
    const dot = svgNode("circle", { cx: x(p.t).toFixed(1), cy: y(p.size).toFixed(1), r: 4, class: "segment-point",
                                    fill: PALETTE[(p.partition ?? 0) % PALETTE.length] });
    dot.appendChild(svgNode("title", {}, `${p.name}: ${p.size} bytes, partition ${p.partition}`));
    svg.appendChild(dot);
  }
  svg.appendChild(svgNode("text", { x: margin.left, y: height - 10 }, new Date(lo).toLocaleString()));
  svg.appendChild(svgNode("text", { x: width - margin.right, y: height - 10, "text-anchor": "end" },
                          new Date(hi).toLocaleString()));
  container.appendChild(svg);
}

window.CuveeCharts = { seriesChart, segmentSizePlot };
