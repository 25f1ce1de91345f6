// The console's only script: refreshes [data-refresh] sections, runs the live tail, asks before [data-confirm]
// forms are sent. Everything is rendered on the server; this only swaps in fresh HTML.
"use strict";

function refresh(el) {
  const every = parseInt(el.dataset.every || "2000", 10);
  const tick = async () => {
    if (!document.hidden) {
      try {
        const r = await fetch(el.dataset.refresh, { credentials: "same-origin" });
        if (r.ok) { el.innerHTML = await r.text(); el.dataset.updated = String(Date.now()); }
      } catch (e) { /* the next tick tries again */ }
    }
    setTimeout(tick, every);
  };
  setTimeout(tick, every);
}

function tail(button) {
  const rows = document.getElementById("record-rows");
  const status = document.getElementById("tail-status");
  let positions = button.dataset.positions;
  let on = false;
  let seen = 0;
  const poll = async () => {
    if (!on) return;
    try {
      const url = new URL(button.dataset.url, location.href);
      url.searchParams.set("positions", positions);
      const r = await fetch(url, { credentials: "same-origin" });
      if (r.ok) {
        const got = await r.json();
        positions = got.positions;
        if (got.count) {
          rows.insertAdjacentHTML("beforeend", got.html);
          seen += got.count;
          const none = document.getElementById("no-records");
          if (none) none.remove();
        }
        status.textContent = "tailing: " + seen + " new record(s)";
      } else {
        status.textContent = "tail stopped: " + r.status;
        on = false;
        button.textContent = "Live tail";
        return;
      }
    } catch (e) { status.textContent = "tail: retrying"; }
    setTimeout(poll, 1000);
  };
  button.addEventListener("click", () => {
    on = !on;
    button.textContent = on ? "Stop tail" : "Live tail";
    status.textContent = on ? "tailing: " + seen + " new record(s)" : "";
    if (on) poll();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-refresh]").forEach(refresh);
  const t = document.getElementById("tail");
  if (t) tail(t);
  document.querySelectorAll("form[data-confirm]").forEach((f) => {
    f.addEventListener("submit", (ev) => { if (!confirm(f.dataset.confirm)) ev.preventDefault(); });
  });
  document.querySelectorAll("[data-back]").forEach((a) => {
    a.addEventListener("click", (ev) => { ev.preventDefault(); history.back(); });
  });
});
