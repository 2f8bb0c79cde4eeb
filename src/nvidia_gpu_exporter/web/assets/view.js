// The live view's updater (docs/view.md): polls the JSON document and redraws the server-rendered tables.
// Every value goes in through textContent or setAttribute, never innerHTML: a hostile name stays text.
// One request at a time, each bounded to 15 s; after a failure the wait doubles, up to 60 s.
(function () {
  "use strict";
  var root = document.getElementById("view");
  if (!root || !window.fetch) return;
  var url = root.getAttribute("data-src");
  var poll = Number(root.getAttribute("data-poll-seconds")) || 5;
  var hot = Number(root.getAttribute("data-hot-celsius")) || 85;
  var status = document.getElementById("update-status");
  var wait = poll;
  // [label, key, unit, has a sparkline] per row, written once in landing.py (ROWS)
  var ROWS = JSON.parse(root.getAttribute("data-rows") || "[]");
  var SVG = "http://www.w3.org/2000/svg";
  var W = 120;
  var H = 24;

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function num(value, digits) {
    return value === null || value === undefined ? "n/a" : Number(value).toFixed(digits || 0);
  }
  function when(t) {
    return t === null || t === undefined ? "never" : new Date(t * 1000).toLocaleTimeString();
  }
  function spark(points, label) {
    points = points || [];
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("role", "img");
    var values = points.filter(function (v) { return v !== null; });
    if (!values.length) {
      svg.setAttribute("aria-label", label + ": no points");
      return svg;
    }
    var low = Math.min.apply(null, values);
    var high = Math.max.apply(null, values);
    svg.setAttribute("aria-label", label + ": " + values.length + " points, " + num(low, 1) + " to " + num(high, 1));
    var span = high - low || 1;
    var step = points.length > 1 ? W / (points.length - 1) : 0;
    var coordinates = [];
    points.forEach(function (v, i) {
      if (v !== null) coordinates.push((i * step).toFixed(1) + "," + (H - 1 - ((v - low) / span) * (H - 2)).toFixed(1));
    });
    var line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", coordinates.join(" "));
    svg.appendChild(line);
    return svg;
  }
  function table(caption, heads, rows) {
    var t = el("table");
    t.appendChild(el("caption", caption));
    var head = el("tr");
    heads.forEach(function (name) {
      var th = el("th", name);
      th.scope = "col";
      head.appendChild(th);
    });
    var thead = el("thead");
    thead.appendChild(head);
    t.appendChild(thead);
    var body = el("tbody");
    rows.forEach(function (cells) {
      var tr = el("tr");
      cells.forEach(function (cell) { tr.appendChild(el("td", cell)); });
      body.appendChild(tr);
    });
    t.appendChild(body);
    return t;
  }
  function more(parent, count, what) {
    if (count > 0) parent.appendChild(el("p", "and " + count + " more " + what + " not shown", "mute"));
  }
  function reading(g, row) {
    var key = row[1];
    var value = g[key];
    var text = num(value, key === "power_draw_watts" ? 1 : 0);
    if (value !== null && key === "memory_used_mib" && g.memory_total_mib !== null) text += " / " + num(g.memory_total_mib);
    if (value !== null) text += " " + row[2];
    if (value !== null && key === "power_draw_watts" && g.power_limit_watts !== null) {
      text += " of " + num(g.power_limit_watts) + " W";
    }
    var tr = el("tr");
    var th = el("th", row[0]);
    th.scope = "row";
    tr.appendChild(th);
    var isHot = key === "temperature_celsius" && value !== null && value >= hot;
    tr.appendChild(el("td", isHot ? text + " HOT" : text, isHot ? "n hot" : "n"));
    var cell = el("td");
    if (row[3]) cell.appendChild(spark((g.history || {})[key], row[0]));
    tr.appendChild(cell);
    return tr;
  }
  var VERDICT_CLASSES = { ok: "ok", degraded: "degraded", failing: "failed" };
  function verdict(section, h) {
    var text = "Health: " + (h.state === "ok" ? h.state : h.state.toUpperCase());
    if (h.action_text) text += ": " + h.action_text;
    section.appendChild(el("p", text, "verdict " + VERDICT_CLASSES[h.state]));
    if (h.reasons.length) {
      var list = el("ul", null, "reasons");
      h.reasons.forEach(function (r) {
        list.appendChild(el("li", r.subsystem + ": " + r.reason + " (" + r.state + "), " + r.evidence + ", since " + when(r.since)));
      });
      section.appendChild(list);
    }
    more(section, h.reasons_omitted, "reasons");
  }
  function gpu(g) {
    var section = el("section", null, "gpu");
    section.setAttribute("aria-label", "GPU " + g.index);
    section.appendChild(el("h3", "GPU " + g.index + ": " + g.name));
    verdict(section, g.health);
    section.appendChild(el("p", g.uuid + " \u00b7 " + g.pci_bus_id + (g.pstate ? " \u00b7 " + g.pstate : ""), "mute"));
    var readings = el("table");
    readings.appendChild(el("caption", "Readings"));
    var body = el("tbody");
    ROWS.forEach(function (row) { body.appendChild(reading(g, row)); });
    var tr = el("tr");
    var th = el("th", "Clock event reasons");
    th.scope = "row";
    tr.appendChild(th);
    var td = el("td", g.clock_event_reasons.length ? g.clock_event_reasons.join(", ") : "none");
    td.colSpan = 2;
    tr.appendChild(td);
    body.appendChild(tr);
    readings.appendChild(body);
    section.appendChild(readings);
    if (g.processes.length) {
      section.appendChild(table("Processes", ["PID", "Name", "Memory", "Pod"], g.processes.map(function (p) {
        return [p.pid, p.name, p.used_memory_mib === null ? "n/a" : num(p.used_memory_mib) + " MiB", p.pod_uid];
      })));
    }
    more(section, g.processes_omitted, "processes");
    if (g.pods.length) {
      section.appendChild(table("Pods", ["Namespace", "Pod", "Container", "MIG device"], g.pods.map(function (p) {
        return [p.namespace, p.pod, p.container, p.mig_uuid];
      })));
    }
    more(section, g.pods_omitted, "pods");
    if (g.mig_devices.length) {
      section.appendChild(table("MIG devices", ["GPU instance", "Compute instance", "Profile", "UUID"],
        g.mig_devices.map(function (m) { return [m.gpu_instance_id, m.compute_instance_id, m.profile, m.uuid]; })));
    }
    more(section, g.mig_devices_omitted, "MIG devices");
    if (g.xids.length) {
      section.appendChild(table("XID errors", ["XID", "Count", "Meaning", "Last seen"], g.xids.map(function (x) {
        return [x.xid, x.count, (x.name || "unknown") + " (" + x.severity + ")", when(x.last_seen)];
      })));
    }
    more(section, g.xids_omitted, "XID codes");
    return section;
  }
  function health(d) {
    var c = d.collection;
    var p = document.getElementById("health");
    p.textContent = "";
    var text = c.state === "ok" ? "Last collection succeeded" : c.state === "failed" ? "Last collection FAILED" : "No collection yet";
    p.appendChild(el("span", text, c.state === "ok" ? "ok" : c.state === "failed" ? "failed" : "mute"));
    var rest = " at " + when(c.finished_at);
    if (c.duration_seconds !== null) rest += " in " + num(c.duration_seconds, 2) + " s";
    rest += "; failed collections: " + c.failed_collections + "; last success: " + when(c.last_success_at);
    if (c.error) rest += "; error: " + c.error;
    p.appendChild(document.createTextNode(rest));
  }
  function draw(d) {
    health(d);
    var box = document.getElementById("gpus");
    box.textContent = "";
    d.gpus.forEach(function (g) { box.appendChild(gpu(g)); });
    if (!d.gpus.length) box.appendChild(el("p", "No GPU readings.", "mute"));
    more(box, d.gpus_omitted, "GPUs");
    var fallen = document.getElementById("fallen");
    fallen.textContent = "";
    d.fallen_off_bus.forEach(function (g) {
      fallen.appendChild(el("li", "Fallen off the bus: " + g.pci_bus_id + " " + g.uuid, "hot"));
    });
    root.setAttribute("data-sequence", String(d.collection.sequence));
  }
  function tick() {
    var controller = window.AbortController ? new AbortController() : null;
    var timer = controller ? setTimeout(function () { controller.abort(); }, 15000) : 0;
    fetch(url, { credentials: "same-origin", cache: "no-store", signal: controller ? controller.signal : undefined })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (d) {
        draw(d);
        wait = poll;
        status.textContent = "Updated " + new Date().toLocaleTimeString();
        status.className = "mute";
      })
      .catch(function (e) {
        wait = Math.min(wait * 2, 60);
        status.textContent = "Update failed (" + e.message + "); retrying in " + wait + " s";
        status.className = "failed";
      })
      .then(function () {
        clearTimeout(timer);
        setTimeout(tick, wait * 1000);
      });
  }
  setTimeout(tick, poll * 1000);
})();
