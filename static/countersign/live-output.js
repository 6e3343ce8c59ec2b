// A run's streamed output, as it comes (live.js's cs:live-chunk), into the run page's list; the
// page subscribes to each run it shows whenever the socket (re)opens or the reviewer's agents change.
// textContent throughout: model output is never parsed as HTML.
//
// Markup: ol[data-live-output=RUN_ID] (its [hidden] section shows on the first chunk).
(() => {
  "use strict";

  if (!window.csLive) return;

  const SAY = {
    "tool-call": (p) => `→ ${p.tool_name} ${JSON.stringify(p.args)}`,
    "tool-result": (p) => `← ${p.tool_name}: ${JSON.stringify(p.result)}`,
    "tool-call-approval": (p) => `⏸ ${p.tool_name} needs approval`,
    "tool-call-suspended": (p) => `⏸ ${p.tool_name} waits for input`,
    finish: (p) => (p.status === "suspended" ? "The run waits for a decision again." : `Run ${p.status}.`),
    error: (p) => `Error: ${p.error}`,
  };

  const span = (className, textContent) => Object.assign(document.createElement("span"), { className, textContent });

  function appendOutput(chunk) {
    // A step's end carries token usage for API streams: nothing a reviewer reads in the output.
    if (chunk.type === "step-finish") return;
    const list = document.querySelector(`[data-live-output='${CSS.escape(chunk.run_id)}']`);
    if (!list) return;
    const section = list.closest("[hidden]");
    if (section) section.hidden = false;
    const kind = chunk.type === "text-delta" ? "text" : chunk.type;
    const payload = chunk.payload || {};
    let last = list.lastElementChild;
    if (last?.getAttribute("data-kind") === "finish" && kind !== "finish") {
      list.textContent = ""; // a new continuation of the same run: start over
      last = null;
    }
    if (kind !== "text" || last?.getAttribute("data-kind") !== "text") {
      last = list.appendChild(document.createElement("li"));
      last.setAttribute("data-kind", kind);
    }
    if (kind === "text") {
      last.textContent += payload.text || "";
    } else {
      last.textContent = SAY[kind] ? SAY[kind](payload) : kind;
    }
    if (kind === "tool-call" && "model_args" in payload) {
      // Approved with edited arguments: the line shows those the tool ran with; say who, show the model's.
      const who = span("edited-by", `edited by ${payload.edited_by || "a reviewer"}`);
      last.append(" ", who, " ", span("model-args", `the model's: ${JSON.stringify(payload.model_args)}`));
    }
  }

  document.addEventListener("cs:live-chunk", (e) => appendOutput(e.detail));

  function subscribeRuns() {
    for (const el of document.querySelectorAll("[data-live-output]")) {
      window.csLive.send({ subscribe_run: el.getAttribute("data-live-output") });
    }
  }
  // (A run's output this page lost, or may see again.)
  document.addEventListener("cs:live-open", subscribeRuns);
  document.addEventListener("cs:live-agents", subscribeRuns);
  // Deferred scripts run in order, but the socket may open while this one is still downloading: its
  // cs:live-open then came before anyone listened.
  if (window.csLive?.isOpen()) subscribeRuns();
})();
