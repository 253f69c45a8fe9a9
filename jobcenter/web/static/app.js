// Every page: the action token (kept for this tab only) and the action buttons.
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

document.addEventListener("DOMContentLoaded", () => {
  const input = document.getElementById("token");
  if (input) {
    input.value = sessionStorage.getItem(TOKEN_KEY) || "";
    input.addEventListener("change", () => sessionStorage.setItem(TOKEN_KEY, input.value));
  }
  wireActions(document);
});

window.jobcenter = { act, notice, wireActions };
