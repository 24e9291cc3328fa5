// moot view: live updates, the confirmed delete, and the compare picker. No dependencies.
"use strict";

function followLiveRun(body) {
  const id = body.dataset.run;
  const stream = new EventSource(`/api/runs/${id}/stream`);
  let pending = false;
  async function refresh() {
    if (pending) return;
    pending = true;
    try {
      const query = new URLSearchParams(window.location.search);  // keeps the page's filters
      query.set("fragment", "1");
      const response = await fetch(`/runs/${id}?${query}`, { headers: { Accept: "text/html" } });
      if (response.ok) body.innerHTML = await response.text();
    } finally {
      pending = false;
    }
  }
  stream.addEventListener("update", (event) => {
    const data = JSON.parse(event.data);
    const badge = document.getElementById("run-status");
    if (badge) { badge.textContent = data.status; badge.className = `badge ${data.status}`; }
    refresh();
  });
  stream.addEventListener("end", () => { stream.close(); refresh(); body.dataset.live = "no"; });
}

// The run list while some run on it is going: its rows (calls, tokens, status) every 3 s, the
// ticked boxes kept, until none is running.
function followRunningRows(table) {
  async function refresh() {
    const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    const rows = fresh.querySelector("table#runs tbody");
    if (!rows) return;
    const picked = new Set([...table.querySelectorAll("input.pick:checked")].map((box) => box.value));
    table.querySelector("tbody").replaceWith(rows);
    rows.querySelectorAll("input.pick").forEach((box) => { box.checked = picked.has(box.value); });
    if (rows.querySelector("tr.status-running")) setTimeout(refresh, 3000);
  }
  if (table.querySelector("tr.status-running")) setTimeout(refresh, 3000);
}

function setUpDelete(button) {
  button.addEventListener("click", async () => {
    const id = button.dataset.run;
    if (!window.confirm(`Delete run ${id} with all its events and items? This cannot be undone.`)) return;
    const response = await fetch(`/api/runs/${id}`, { method: "DELETE", headers: { "X-Moot-Confirm": id } });
    if (response.ok) window.location.assign("/");
    else window.alert(`Not deleted: ${(await response.json()).detail}`);
  });
}

function setUpCompare(button) {
  button.addEventListener("click", () => {
    const picked = [...document.querySelectorAll("input.pick:checked")].map((box) => box.value);
    if (picked.length !== 2) { window.alert("Tick exactly two runs to compare."); return; }
    window.location.assign(`/compare?a=${encodeURIComponent(picked[0])}&b=${encodeURIComponent(picked[1])}`);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const body = document.getElementById("run-body");
  if (body && body.dataset.live === "yes") followLiveRun(body);
  const del = document.getElementById("delete-run");
  if (del) setUpDelete(del);
  const runs = document.getElementById("runs");
  if (runs) followRunningRows(runs);
  const cmp = document.getElementById("compare-picked");
  if (cmp) setUpCompare(cmp);
});
