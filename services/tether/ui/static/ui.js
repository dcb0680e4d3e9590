// Live pages: a page that names a feed (data-live) re-renders its body (data-part) when
// the feed says something changed, and appends streamed tokens as they come.
(() => {
  const body = document.getElementById("body");
  if (!body || !body.dataset.live || !window.EventSource) return;
  const texts = new Map(); // "step:branch" -> {attempt, text}
  let pending = null;

  const paint = () => {
    for (const [key, { text }] of texts) {
      const box = body.querySelector(`pre[data-tokens="${key}"]`);
      if (box && box.textContent !== text) box.textContent = text;
    }
  };
  const refresh = () => {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      const open = [...body.querySelectorAll("details[open] > summary")].map((s) => s.closest("[data-step]")?.dataset.step + s.textContent);
      const response = await fetch(body.dataset.part, { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      body.innerHTML = await response.text();
      for (const summary of body.querySelectorAll("details > summary")) {
        if (open.includes(summary.closest("[data-step]")?.dataset.step + summary.textContent)) summary.parentElement.open = true;
      }
      paint();
    }, 150);
  };

  const feed = new EventSource(body.dataset.live);
  feed.addEventListener("changed", refresh);
  feed.addEventListener("status", (e) => {
    refresh();
    if (["completed", "failed", "cancelled"].includes(JSON.parse(e.data).event)) feed.close();
  });
  feed.addEventListener("token", (e) => {
    const chunk = JSON.parse(e.data);
    const key = `${chunk.step}:${chunk.branch ?? ""}`;
    const seen = texts.get(key);
    if (!seen || chunk.attempt > seen.attempt) texts.set(key, { attempt: chunk.attempt, text: "" });
    const entry = texts.get(key);
    if (chunk.attempt === entry.attempt) entry.text += chunk.delta || "";
    paint();
  });
})();
