// The image browser: the class and top-1 filters' type-ahead, the selection (tick thumbnails,
// Shift-click ticks a range, or the whole page), the reason boxes of the actions, and the image
// page's previous / next keys.
(function () {
  "use strict";
  // Enter in a reason box excludes (the form's first button would otherwise be "Queue for review")
  document.querySelectorAll("input[name=reason]").forEach((input) => input.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    e.preventDefault();
    const button = input.form && input.form.querySelector("button[value=exclude]");
    if (button) button.click();
  }));
  // Enter in the label's reason (or wnid) box labels
  document.querySelectorAll("input[name=label_reason], input[name=wnids]").forEach((input) => input.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    e.preventDefault();
    const button = input.form && input.form.querySelector("button[value=label]");
    if (button) button.click();
  }));
  // The label's ID classes by name, with the review screen's class search (issue 31.4): type,
  // arrows and Enter or a click pick one (Shift keeps the list open for another); its wnid goes
  // into the wnids box, its name beside it, and the label becomes "id". Esc closes the list.
  const idInput = document.querySelector("input.id-class-search");
  if (idInput && window.OODIdSearch) {
    const list = document.getElementById("label-id-results"), picked = document.getElementById("label-id-picked");
    const wnidsBox = idInput.form.querySelector("input[name=wnids]"), decision = idInput.form.querySelector("select[name=decision]");
    const chosen = [];
    const finder = window.OODIdSearch(idInput.dataset.classesUrl, idInput, list, (wnid, name, more) => {
      const typed = wnidsBox.value.replace(/,/g, " ").split(/\s+/).filter(Boolean);
      if (!typed.includes(wnid)) wnidsBox.value = [...typed, wnid].join(" ");
      if (!chosen.some((c) => c.wnid === wnid)) chosen.push({ wnid, name });
      picked.textContent = chosen.filter((c) => wnidsBox.value.includes(c.wnid)).map((c) => `${c.name} (${c.wnid})`).join(", ");
      if (decision) decision.value = "id";
      finder.clear();
      list.hidden = !more;
      if (!more) idInput.blur();
    }, (msg) => { picked.textContent = msg; });
    idInput.addEventListener("focus", () => { finder.open(); });
    idInput.addEventListener("input", () => { list.hidden = !idInput.value.trim(); });
    idInput.addEventListener("blur", () => { list.hidden = true; });
    idInput.addEventListener("keydown", (e) => {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") { e.preventDefault(); finder.move(e.key === "ArrowDown" ? 1 : -1); }
      else if (e.key === "Escape") { finder.clear(); list.hidden = true; }
      else if (e.key === "Enter") {
        e.preventDefault();  // Enter here picks a class, it does not submit the form
        const row = finder.current();
        if (row) {
          const li = list.querySelector("li.hl");
          if (li) li.dispatchEvent(new MouseEvent("mousedown", { shiftKey: e.shiftKey }));
        }
      }
    });
  }
  // a note on the duplicate-group page is not a decision: Enter there submits nothing
  document.querySelectorAll(".member input[name=note]").forEach((input) => input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") e.preventDefault();
  }));
  // Class and top-1 filters by name: type, and the server ranks the classes by the class search's
  // rule (api/browse-classes); arrows and Enter or a click pick one (its id / wnid goes into the
  // hidden field), Esc closes the list. Text typed without picking is looked up by the server.
  const CS = window.OODClassSearch;
  document.querySelectorAll("input.typeahead").forEach((input) => {
    const box = input.closest("label"), list = box.querySelector(".typeahead-results");
    const hidden = input.form.querySelector(`input[name=${input.dataset.hidden}]`);
    const sourceSelect = input.form.querySelector("select[name=source]");
    let results = [], hl = 0, timer = null, seq = 0, typed = "", stale = false;
    function close() { list.hidden = true; list.replaceChildren(); results = []; }
    function pick(r) {
      hidden.value = input.dataset.kind === "class" ? r.id : r.wnid;
      input.value = input.dataset.kind === "class" ? `${r.label}` : r.name;
      input.dataset.picked = input.value;
      close();
    }
    function show() {
      if (!results.length && typed) {  // say so at once, rather than a list that silently does not open
        const where = input.dataset.kind === "class" && sourceSelect && sourceSelect.value ? ` in ${sourceSelect.value}` : "";
        const none = document.createElement("li");
        none.className = "none";
        none.textContent = `No ${input.dataset.kind === "class" ? "candidate class" : "ImageNet-1K class"}${where} matches “${typed}”.`;
        list.replaceChildren(none);
        list.hidden = false;
        return;
      }
      list.replaceChildren(...results.map((r, i) => {
        const extra = input.dataset.kind === "class" ? r.source : "";
        const li = CS.resultRow({ name: r.name, lemmas: r.lemmas, gloss: r.gloss, wnid: r.wnid }, typed, extra);
        li.className = i === hl ? "hl" : "";
        li.dataset.tier = r.tier;
        li.addEventListener("mousedown", (e) => { e.preventDefault(); pick(r); });
        return li;
      }));
      list.hidden = !results.length;
    }
    async function search() {
      const mine = ++seq, q = input.value.trim();
      if (!q) { stale = false; close(); return; }
      const params = new URLSearchParams({ kind: input.dataset.kind, q });
      if (input.dataset.kind === "class" && sourceSelect && sourceSelect.value) params.set("source", sourceSelect.value);
      const r = await fetch(`${input.form.dataset.classesApi}?${params}`, { credentials: "same-origin" });
      const data = await r.json().catch(() => ({}));
      if (mine !== seq) return;  // a later key's answer wins
      stale = false;
      typed = q;
      results = r.ok ? data.results : [];
      hl = 0;
      show();
    }
    input.addEventListener("input", () => {
      if (input.value !== input.dataset.picked) hidden.value = "";  // typed over a picked class: look the text up again
      stale = true;  // the list on screen answers an earlier text until the new answer comes
      clearTimeout(timer);
      timer = setTimeout(search, 120);
    });
    input.addEventListener("keydown", (e) => {
      if ((e.key === "ArrowDown" || e.key === "ArrowUp") && results.length) {
        e.preventDefault();
        hl = (hl + (e.key === "ArrowDown" ? 1 : -1) + results.length) % results.length;
        [...list.children].forEach((li, i) => li.classList.toggle("hl", i === hl));
      } else if (e.key === "Enter" && (stale || (!list.hidden && results[hl]))) {
        // Enter takes the first row for the text as typed, never a row of an earlier text's list:
        // a search still on its way is finished first; no match sends the form (the server says why)
        e.preventDefault();
        const take = () => { if (results[hl]) pick(results[hl]); else input.form.requestSubmit(); };
        if (stale) { clearTimeout(timer); search().then(take); } else take();
      } else if (e.key === "Escape") {
        close();
      }
    });
    input.addEventListener("blur", () => setTimeout(close, 100));
    if (hidden.value) input.dataset.picked = input.value;
  });
  // the filters' URL holds only what is set: a picked class goes by its id, not its name too
  const filters = document.getElementById("filters");
  if (filters) filters.addEventListener("submit", () => {
    filters.querySelectorAll("input.typeahead").forEach((input) => {
      const hidden = filters.querySelector(`input[name=${input.dataset.hidden}]`);
      if (hidden.value && input.value === input.dataset.picked) input.disabled = true;
    });
    filters.querySelectorAll("input, select").forEach((el) => { if (!el.value) el.disabled = true; });
  });
  window.addEventListener("pageshow", () => {  // back to a page left by submitting it: its fields work again
    if (filters) filters.querySelectorAll(":disabled").forEach((el) => { el.disabled = false; });
  });
  // the image page: ← and → step through the list it was opened from (not while typing)
  const prev = document.getElementById("prev-image"), next = document.getElementById("next-image");
  if (prev || next) document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || e.target.closest("input, textarea, select")) return;
    if (e.key === "ArrowLeft" && prev) { e.preventDefault(); prev.click(); }
    if (e.key === "ArrowRight" && next) { e.preventDefault(); next.click(); }
  });
  const grid = document.getElementById("grid");
  if (!grid) return;
  const boxes = () => [...grid.querySelectorAll("input[name=ids]")];
  const count = document.getElementById("selected-count");
  let last = null;
  function update() {
    const all = boxes();
    all.forEach((b) => b.closest("li").classList.toggle("selected", b.checked));
    if (count) count.textContent = `${all.filter((b) => b.checked).length} selected`;
  }
  grid.addEventListener("click", (e) => {
    const box = e.target.closest("input[name=ids]");
    if (!box) return;
    const all = boxes();
    if (e.shiftKey && last !== null) {
      const [a, b] = [all.indexOf(last), all.indexOf(box)].sort((x, y) => x - y);
      for (let i = a; i <= b; i++) all[i].checked = box.checked;
    }
    last = box;
    update();
  });
  const page = document.getElementById("select-page");
  if (page) page.addEventListener("click", () => {
    const all = boxes(), on = !all.every((b) => b.checked);
    all.forEach((b) => { b.checked = on; });
    update();
  });
  update();
})();
