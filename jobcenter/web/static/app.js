// Every page: the action token (kept for this tab only), the action buttons, and the
// sections a page keeps live.
"use strict";

const TOKEN_KEY = "jobcenter-dashboard-token";
const TOKEN_HEADER = "X-Jobcenter-Token";

function notice(message, isError) {
  const box = document.getElementById("notice");
  box.textContent = message;
  box.classList.toggle("error", Boolean(isError));
  box.classList.remove("hidden");
}

// POST an action with the token in a header; resolves to the server's message.
async function act(url) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  if (!token) {
    throw new Error("enter the dashboard's token (top right) to act");
  }
  const reply = await fetch(url, {
    method: "POST",
    headers: { [TOKEN_HEADER]: token, Accept: "application/json" },
    credentials: "same-origin",
  });
  const body = await reply.json().catch(() => ({ error: reply.statusText }));
  if (!reply.ok) {
    throw new Error(body.error || reply.statusText);
  }
  return body.message;
}

function wireActions(root) {
  for (const button of root.querySelectorAll("button.act")) {
    button.addEventListener("click", async () => {
      if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) {
        return;
      }
      button.disabled = true;
      try {
        notice(await act(button.dataset.url));
        document.dispatchEvent(new CustomEvent("jobcenter:acted", { detail: button.dataset.url }));
        if (!button.closest("[data-live]")) {
          window.setTimeout(() => window.location.reload(), 600);
        }
      } catch (err) {
        notice(err.message, true);
      } finally {
        button.disabled = false;
      }
    });
  }
}

// Sections marked data-refresh="SECONDS" (the jobs list) are read again from the page's own
// URL that often, while the tab is shown, and each is swapped for its fresh copy (by id):
// the page stays live without a reload, and a filter being typed is left alone. A read that
// fails (Redis away: the server's page says why) is tried again at the next turn.
function keepLive() {
  const first = document.querySelector("[data-refresh]");
  if (!first) {
    return;
  }
  const everyMs = Number(first.dataset.refresh) * 1000;
  const status = document.getElementById("live-status");
  async function refresh() {
    if (!document.hidden) {
      try {
        const reply = await fetch(window.location.href, { credentials: "same-origin" });
        const fresh = new DOMParser().parseFromString(await reply.text(), "text/html");
        if (!reply.ok) {
          const why = fresh.getElementById("outage") || fresh.querySelector(".error-message");
          throw new Error(why ? why.textContent : reply.statusText);
        }
        for (const section of document.querySelectorAll("[data-refresh]")) {
          const copy = fresh.getElementById(section.id);
          if (copy) {
            section.replaceWith(copy);
          }
        }
        if (status) {
          status.textContent = `updated ${new Date().toLocaleTimeString()}`;
          status.classList.remove("bad");
        }
      } catch (err) {
        if (status) {
          status.textContent = `live updates paused: ${err.message.replace(/\.\s*$/, "")}; trying again`;
          status.classList.add("bad");
        }
      }
    }
    window.setTimeout(refresh, everyMs);
  }
  window.setTimeout(refresh, everyMs);
}

document.addEventListener("DOMContentLoaded", () => {
  const input = document.getElementById("token");
  if (input) {
    input.value = sessionStorage.getItem(TOKEN_KEY) || "";
    input.addEventListener("change", () => sessionStorage.setItem(TOKEN_KEY, input.value));
  }
  wireActions(document);
  keepLive();
});

window.jobcenter = { act, notice, wireActions };
