// Flagged classes: map an unmapped folder to a WordNet noun by searching (↑/↓ and Enter, or click).
(function () {
  "use strict";
  document.querySelectorAll("form.class-map").forEach((form) => {
    const input = form.querySelector(".noun-search"), list = form.querySelector(".noun-results");
    const wnid = form.querySelector(".map-wnid"), chosen = form.querySelector(".chosen-noun"), button = form.querySelector(".map-button");
    let results = [], hl = 0, timer = null, seq = 0;
    function choose(n) {
      wnid.value = n.wnid;
      chosen.textContent = `Chosen: ${n.label} (${n.wnid}) — ${n.gloss}`;
      button.disabled = false;
      list.replaceChildren();
    }
    function show() {
      list.replaceChildren(...results.map((n, i) => {
        const li = document.createElement("li");
        li.className = i === hl ? "hl" : "";
        li.dataset.wnid = n.wnid;
        const strong = document.createElement("strong"); strong.textContent = n.label;
        const rest = document.createElement("span"); rest.className = "muted small"; rest.textContent = ` ${n.wnid} · ${n.gloss}`;
        li.append(strong, rest);
        li.addEventListener("mousedown", (e) => { e.preventDefault(); choose(n); });
        return li;
      }));
    }
    async function search() {
      const mine = ++seq, q = input.value.trim();
      if (!q) { results = []; show(); return; }
      const r = await fetch(`${input.dataset.api}?q=${encodeURIComponent(q)}`, { credentials: "same-origin" });
      const data = await r.json().catch(() => ({}));
      if (mine !== seq) return;
      if (!r.ok) { chosen.textContent = data.error || `search failed (${r.status})`; return; }
      results = data.nouns; hl = 0; show();
    }
    input.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(search, 150); });
    input.addEventListener("keydown", (e) => {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        if (results.length) { hl = (hl + (e.key === "ArrowDown" ? 1 : -1) + results.length) % results.length; show(); }
      } else if (e.key === "Enter") {
        e.preventDefault();
        if (results[hl]) choose(results[hl]);
      }
    });
  });
})();
