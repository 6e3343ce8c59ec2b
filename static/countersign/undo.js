// A decision held for its undo window (partials/run_card.html's form.undo-form) counts its seconds
// down. At zero the server takes it (its sweep, whatever this page does), so Undo goes and the line
// says what stands ("Approved by you").
//
// Markup: form.undo-form[data-undo-seconds] > button.undo-button, span.undo-left
(() => {
  "use strict";

  const ends = new WeakMap(); // form -> when its window ends (this page's clock)

  function tick() {
    const now = Date.now();
    for (const form of document.querySelectorAll("form.undo-form[data-undo-seconds]")) {
      if (!ends.has(form)) ends.set(form, now + Number(form.getAttribute("data-undo-seconds")) * 1000);
      const left = Math.ceil((ends.get(form) - now) / 1000);
      if (left > 0) {
        const shown = form.querySelector(".undo-left");
        if (shown) shown.textContent = `${left} s`;
      } else if (!form.querySelector(".htmx-request, button[disabled]")) {
        form.remove(); // (an Undo on its way is left to its answer)
      }
    }
  }

  window.setInterval(tick, 250);
  document.addEventListener("htmx:afterSettle", tick);
})();
