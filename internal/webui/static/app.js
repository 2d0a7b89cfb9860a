// vmgate web UI: the little the pages need beyond HTML. No framework, no inline
// script, no style attribute (the Content-Security-Policy forbids them): the script
// changes text, attributes and SVG shapes only.
"use strict";

(function () {
  // A page restored from the back/forward cache may belong to a session that has
  // ended (logout): load it again, so the server decides what it shows.
  window.addEventListener("pageshow", function (e) {
    if (e.persisted) { window.location.reload(); }
  });

  document.addEventListener("DOMContentLoaded", function () {
    autosubmit();
    submitOnce();
    var task = document.getElementById("task");
    if (task && task.dataset.events) { followTask(task.dataset.events); }
    var op = document.getElementById("operation");
    if (op && op.dataset.events) { followOperation(op.dataset.events); }
    var main = document.getElementById("main");
    if (main && main.dataset.live) { followPage(main.dataset.live); }
  });

  // Filters apply as soon as a choice changes (the Apply button stays for
  // keyboards and browsers without script).
  function autosubmit() {
    document.querySelectorAll("[data-autosubmit]").forEach(function (el) {
      el.addEventListener("change", function () {
        if (el.form) { el.form.requestSubmit(); }
      });
    });
  }

  // A form sent once is not sent again by a second click while the first is on its
  // way (a double click on Start would start nothing twice, but says so loudly).
  function submitOnce(root) {
    (root || document).querySelectorAll("form[method=post]").forEach(function (form) {
      if (form.dataset.once) { return; }
      form.dataset.once = "1";
      form.addEventListener("submit", function () {
        window.setTimeout(function () {
          form.querySelectorAll("button[type=submit]").forEach(function (b) {
            b.disabled = true;
            b.setAttribute("aria-busy", "true");
          });
        }, 0);
      });
    });
  }

  function byId(id) { return document.getElementById(id); }

  // followPage keeps a live page up to date from its stream: each "regions"
  // event carries the HTML of the page's regions that changed, rendered by the
  // server as a reload would render them. What the person ticked in a region
  // stays ticked.
  function followPage(url) {
    var source = new EventSource(url);
    source.addEventListener("regions", function (e) {
      var regions;
      try { regions = JSON.parse(e.data); } catch (err) { return; }
      Object.keys(regions).forEach(function (id) {
        var el = byId(id);
        if (!el || !el.hasAttribute("data-region")) { return; }
        var ticked = {};
        el.querySelectorAll("input[type=checkbox]").forEach(function (box) {
          ticked[box.name + "=" + box.value] = box.checked;
        });
        el.innerHTML = regions[id];
        el.querySelectorAll("input[type=checkbox]").forEach(function (box) {
          var k = box.name + "=" + box.value;
          if (Object.prototype.hasOwnProperty.call(ticked, k)) { box.checked = ticked[k]; }
        });
        submitOnce(el);
      });
      document.body.setAttribute("data-live-seq", String((parseInt(document.body.getAttribute("data-live-seq"), 10) || 0) + 1));
    });
    source.addEventListener("reload", function () {
      source.close();
      window.location.reload();
    });
    source.addEventListener("session", function () {
      source.close();
      window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname + window.location.search));
    });
    // A stream refused (too many open, the page gone) leaves the page as it is:
    // a reload would only be refused again.
  }

  function setText(id, text) {
    var el = byId(id);
    if (el && el.textContent !== text) { el.textContent = text; }
  }

  // humanBytes matches the server's binary units, for the chart's peak label.
  function humanBytes(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"];
    var i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
  }

  // followTask keeps a task page up to date from the UI's event stream: result,
  // progress bar, figures, the rate chart and the log.
  function followTask(url) {
    var samples = [];
    var source = new EventSource(url);
    source.addEventListener("task", function (e) {
      var t;
      try { t = JSON.parse(e.data); } catch (err) { return; }
      showTask(t, samples);
    });
    source.addEventListener("end", function () {
      source.close();
    });
    source.addEventListener("session", function () {
      source.close();
      window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) {
        // The server refused the stream (the session ended, or the task is gone):
        // the page itself says which.
        window.setTimeout(function () { window.location.reload(); }, 3000);
      }
    });
  }

  var resultWords = { ok: "ok", warnings: "warnings", failed: "failed", running: "running" };
  var resultClass = { ok: "badge-ok", warnings: "badge-warn", failed: "badge-bad", running: "badge-running" };

  function showTask(t, samples) {
    var res = byId("task-result");
    if (res) {
      var badge = res.querySelector(".badge");
      var word = resultWords[t.result] || t.result;
      if (badge && badge.textContent !== word) {
        badge.textContent = word;
        badge.className = "badge " + (resultClass[t.result] || "");
      }
    }
    setText("task-exit", t.exitStatus || "–");
    if (t.ended) { setText("task-ended", t.ended); }
    var abort = byId("task-abort");
    if (abort && t.finished) { abort.hidden = true; }
    var errEl = byId("task-error");
    if (errEl) {
      errEl.textContent = t.error || "";
      errEl.hidden = !t.error;
    }
    if (t.newNode) {
      var moved = byId("task-moved");
      var link = byId("task-moved-link");
      if (link) {
        link.textContent = t.newNode;
        link.setAttribute("href", t.vmUrl);
      }
      if (moved) { moved.hidden = false; }
    }
    if (t.migration) { showProgress(t, samples); }
    if (t.log && t.log.length) { appendLog(t.log); }
  }

  function showProgress(t, samples) {
    if (t.hasProgress) {
      var bar = byId("task-bar");
      var pct = String(t.percent);
      if (bar && bar.getAttribute("aria-valuenow") !== pct) {
        bar.setAttribute("aria-valuenow", pct);
        bar.setAttribute("aria-valuetext", t.percentText + (t.phase ? ", " + t.phase : ""));
        byId("task-bar-fg").setAttribute("width", pct);
      }
      setText("task-pct", t.percentText);
      setText("task-phase", t.phase || "");
      setText("task-transferred", t.transferred || "–");
      setText("task-total", t.total || "–");
    }
    setText("task-rate", t.rate || "–");
    setText("task-eta", t.eta || "–");
    if (t.rateBytes > 0) {
      samples.push([t.elapsed, t.rateBytes]);
      if (samples.length > 600) { samples.shift(); }
      drawChart(samples);
    }
  }

  // drawChart draws the rate samples as a line and an area in a 300×100 box.
  function drawChart(samples) {
    var line = byId("task-chart-line");
    var area = byId("task-chart-area");
    if (!line || !area) { return; }
    byId("task-chart-box").hidden = false;
    if (samples.length === 1) {
      // One sample is a level line across the chart: the rate so far.
      line.setAttribute("points", "0,9.1 300,9.1");
      area.setAttribute("points", "0,100 0,9.1 300,9.1 300,100");
      setText("task-chart-max", humanBytes(samples[0][1]) + "/s");
      setText("task-chart-span", "one sample so far");
      return;
    }
    var x0 = samples[0][0];
    var span = Math.max(10, samples[samples.length - 1][0] - x0);
    var peak = 0;
    samples.forEach(function (s) { peak = Math.max(peak, s[1]); });
    var top = peak * 1.1;
    var pts = samples.map(function (s) {
      var x = ((s[0] - x0) / span) * 300;
      var y = 100 - (s[1] / top) * 100;
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    line.setAttribute("points", pts.join(" "));
    var lastX = (((samples[samples.length - 1][0] - x0) / span) * 300).toFixed(1);
    area.setAttribute("points", "0,100 " + pts.join(" ") + " " + lastX + ",100");
    setText("task-chart-max", humanBytes(peak) + "/s");
    setText("task-chart-span", Math.round(span) + " s");
  }

  // followOperation keeps an operation's page up to date from the UI's event
  // stream: its status and counts, and each VM's row (state, progress, task).
  function followOperation(url) {
    var source = new EventSource(url);
    source.addEventListener("operation", function (e) {
      var o;
      try { o = JSON.parse(e.data); } catch (err) { return; }
      showOperation(o);
    });
    source.addEventListener("end", function () { source.close(); });
    source.addEventListener("session", function () {
      source.close();
      window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) {
        window.setTimeout(function () { window.location.reload(); }, 3000);
      }
    });
  }

  function showOperation(o) {
    var st = byId("op-status");
    if (st) {
      var badge = st.querySelector(".badge");
      if (badge && badge.textContent !== o.statusText) {
        badge.textContent = o.statusText;
        badge.className = "badge " + o.statusClass;
      }
    }
    var left = byId("op-left");
    var leftList = byId("op-left-list");
    if (left && leftList && o.left && o.left.length) {
      leftList.textContent = "";
      o.left.forEach(function (s) {
        var li = document.createElement("li");
        li.textContent = s;
        leftList.appendChild(li);
      });
      left.hidden = false;
    }
    setText("op-counts", o.counts);
    if (o.ended) { setText("op-ended", o.ended); }
    var cancelled = byId("op-cancelled");
    if (cancelled && o.cancelRequested) { cancelled.hidden = false; }
    var stop = byId("op-stop");
    if (stop && o.finished) { stop.hidden = true; }
    if (o.rolling) { showRolling(o.rolling); }
    (o.items || []).forEach(function (it) {
      var row = byId("op-item-" + it.vmid);
      if (!row) { return; }
      var state = row.querySelector(".op-state");
      if (state && state.textContent !== it.state) {
        state.textContent = it.state;
        state.className = "badge " + it.badge + " op-state";
      }
      var pct = row.querySelector(".op-pct");
      if (pct && it.action === "migrate") { pct.textContent = it.percentText; }
      var bar = row.querySelector(".op-bar");
      if (bar) {
        bar.setAttribute("width", String(it.percent));
        bar.parentNode.setAttribute("aria-valuenow", String(it.percent));
      }
      var phase = row.querySelector(".op-phase");
      if (phase) { phase.textContent = (it.phase || "") + (it.rate ? " · " + it.rate : ""); }
      var task = row.querySelector(".op-task");
      if (task && it.taskUrl) {
        task.setAttribute("href", it.taskUrl);
        task.hidden = false;
      }
      var err = row.querySelector(".op-error");
      if (err) { err.textContent = it.error || ""; }
      var vm = row.querySelector(".op-vm");
      if (vm && it.vmUrl) { vm.setAttribute("href", it.vmUrl); }
    });
  }

  // showRolling keeps a rolling maintenance's nodes, pause and log up to date.
  function showRolling(r) {
    var paused = byId("roll-paused");
    if (paused) {
      paused.hidden = !r.paused;
      setText("roll-paused-why", r.paused || "");
    }
    (r.nodes || []).forEach(function (n) {
      var row = byId("roll-node-" + n.node);
      if (!row) { return; }
      var step = row.querySelector(".roll-step");
      if (step && step.textContent !== n.step) {
        step.textContent = n.step;
        step.className = "badge " + n.badge + " roll-step";
      }
      var reboot = row.querySelector(".roll-reboot");
      if (reboot) { reboot.textContent = n.reboot; }
      var err = row.querySelector(".roll-error");
      if (err) { err.textContent = n.error || ""; }
    });
    var log = byId("roll-log");
    if (log && r.log) { log.textContent = r.log.join("\n") + "\n"; }
  }

  function appendLog(lines) {
    var log = byId("task-log");
    if (!log) { return; }
    var atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
    var text = "";
    lines.forEach(function (l) { text += l.T + "\n"; });
    log.appendChild(document.createTextNode(text));
    var count = byId("task-log-count");
    if (count) {
      var n = parseInt(count.textContent, 10) || 0;
      count.textContent = (n + lines.length) + " lines";
    }
    if (atEnd) { log.scrollTop = log.scrollHeight; }
  }
}());
