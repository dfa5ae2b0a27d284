// The type-ahead search over every ID class, shared by the review and adjudication screens
// (the #search input, #results list): names starting with the text first, then any name, lemma
// or wnid containing it; arrows move the highlight, the caller decides what Enter does.
(function () {
  "use strict";
  window.OODIdSearch = function (classesUrl, input, list, onPick, onError) {
    let classes = null, results = [], hl = 0;
    async function load() {
      if (classes) return;
      try {
        const r = await fetch(classesUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!r.ok) throw new Error(`server answered ${r.status}`);
        classes = (await r.json()).classes;
      } catch (e) { classes = []; if (onError) onError(`Could not load the ID classes: ${e.message}`); }
    }
    function show() {
      list.replaceChildren(...results.map((c, i) => {
        const li = document.createElement("li");
        li.className = i === hl ? "hl" : "";
        li.dataset.wnid = c[0];
        const name = document.createElement("strong"); name.textContent = c[1];
        const rest = document.createElement("span"); rest.className = "muted small"; rest.textContent = ` ${c[0]} · ${c[2]}`;
        li.append(name, rest);
        li.addEventListener("mousedown", (ev) => { ev.preventDefault(); onPick(c[0], c[1], ev.shiftKey); });
        return li;
      }));
    }
    function search(text) {
      const q = text.trim().toLowerCase();
      results = [];
      if (q && classes) {
        const starts = [], contains = [];
        for (const c of classes) {
          const label = c[1].toLowerCase();
          if (label.startsWith(q) || c[0] === q) starts.push(c);
          else if (`${label} | ${c[2].toLowerCase()} | ${c[0]}`.includes(q)) contains.push(c);
        }
        results = starts.concat(contains).slice(0, 8);
      }
      hl = 0;
      show();
    }
    function move(delta) {
      if (!results.length) return;
      hl = (hl + delta + results.length) % results.length;
      [...list.children].forEach((li, i) => li.classList.toggle("hl", i === hl));
    }
    function open() { input.focus(); load().then(() => search(input.value)); }
    function clear() { input.value = ""; results = []; list.replaceChildren(); }
    input.addEventListener("input", () => search(input.value));
    return { open, clear, move, search, current: () => results[hl] };
  };
})();
