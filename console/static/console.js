// Live updates, the one thing that needs JavaScript: with the "live" box ticked, the region
// is fetched again every few seconds and swapped in place. Everything else is plain HTML.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("live");
  if (!box) return;
  const region = document.getElementById(box.dataset.liveRegion);
  let timer = null;
  async function refresh() {
    try {
      const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById(region.id);
      if (fresh) region.innerHTML = fresh.innerHTML;
    } catch (error) {
      // The console itself went away; the next tick tries again.
    }
  }
  box.addEventListener("change", () => {
    clearInterval(timer);
    if (box.checked) timer = setInterval(refresh, 5000);
  });
});
