// A large purchase's progress on its page (docs/buyers.md#a-purchase): poll the purchase's API resource (the
// session signs the request in) every few seconds, update the bar and the text, and reload the page once the
// purchase has completed or failed.  Without JavaScript the page's "Reload" link does the same by hand.
"use strict";
(function () {
  const card = document.getElementById("progress-card");
  if (!card) return;
  const url = card.dataset.statusUrl;
  const bar = document.getElementById("progress-bar");
  const text = document.getElementById("progress-text");
  let failures = 0;
  async function poll() {
    try {
      const response = await fetch(url, {headers: {Accept: "application/json"}, credentials: "same-origin"});
      if (!response.ok) throw new Error(String(response.status));
      const body = await response.json();
      failures = 0;
      if (body.status === "completed" || body.status === "failed") {
        window.location.reload();
        return;
      }
      const p = body.progress || {processed: 0, total: 0};
      if (p.total > 0) {
        bar.max = p.total;
        bar.value = p.processed;
        text.textContent = `${p.processed} of ${p.total} values processed (${Math.floor(100 * p.processed / p.total)}%).`;
      }
    } catch (e) {
      failures += 1;
      if (failures > 5) return;  // give up quietly: the Reload link still works
    }
    window.setTimeout(poll, 2000);
  }
  window.setTimeout(poll, 2000);
})();
