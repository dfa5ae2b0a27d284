// The one controller behind the decision screens (single-image review, grid review,
// adjudication): the JSON calls, the status line, the "id" choice (I, then 1-5 for a top-5 class,
// Shift adds more, / or any letter searches every ID class, Enter records, Esc cancels), the note and help keys,
// and keys typed ahead. A screen supplies what differs: the top-5 on screen, what recording a
// decision does, and keys of its own.
//
// Keys typed ahead: while a decision is being saved, every key pressed is queued and applied in
// order once the screen shows what it applies to (the next image, the next page); the status line
// counts them. If the save fails, the queued keys are not applied and the status line says how
// many were not. A screen that does not queue (adjudication: each final word is deliberate) refuses them visibly.
(function () {
  "use strict";
  const csrf = () => decodeURIComponent((document.cookie.match(/(?:^|; )csrftoken=([^;]+)/) || [])[1] || "");
  const MAX_AHEAD = 50;

  async function call(url, body) {
    const opts = body === undefined ? { headers: { Accept: "application/json" } }
      : { method: "POST", headers: { "Content-Type": "application/json", "X-CSRFToken": csrf(), Accept: "application/json" },
          body: JSON.stringify(body) };
    const r = await fetch(url, { credentials: "same-origin", ...opts });
    let data = {};
    try { data = await r.json(); } catch (e) { /* not JSON: handled below */ }
    if (r.status === 401) { window.location = "/accounts/login/?next=" + encodeURIComponent(location.pathname); throw new Error("logged out"); }
    if (!r.ok) throw new Error(data.error || `server answered ${r.status}`);
    return data;
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children) if (c) e.append(c);
    return e;
  }

  const describe = (k) => (k.key === " " ? "Space" : k.key.length === 1 ? k.key.toUpperCase() : k.key);

  /* cfg: {
       root: element (gets the id-mode / searching / saving classes),
       classesUrl: the ID-class list for the search,
       top5: () => [{wnid, label}] of what the keys act on now (empty: nothing to decide),
       record: (decision, wnids, labels) => a Promise (resolves false or throws when not saved) or nothing
               (labels: the chosen ID classes' names, beside their wnids),
       direct: {key: decision} recorded at once (o, u, n, s),
       keys: {key: (ev) => void | Promise}: the screen's own keys (a Promise makes the screen busy),
       before: (ev) => true when the screen handled the key itself (zoom, cursor),
       zoomKeysOff: () => true while digits belong to the ID choice,
       idPrompt: text shown when the ID choice opens,
       typeAhead: false to refuse keys while busy instead of queueing them,
     } */
  window.OODScreen = function (cfg) {
    const $ = (id) => document.getElementById(id);
    const root = cfg.root;
    let mode = "decide", chosen = [], busy = false, ahead = [];
    const help = $("help"), note = $("note") || $("adj-note"), search = $("search");

    function status(text, kind) {
      const s = $("status");
      if (!s) return;
      s.textContent = text;
      s.className = "status" + (kind ? " " + kind : "");
    }

    function showChosen() {
      const box = $("chosen");
      box.hidden = chosen.length === 0;
      box.textContent = chosen.length ? `Chosen: ${chosen.map((c) => c.label).join(", ")} — Enter records, Esc cancels` : "";
    }
    function enterId() {
      if (!cfg.top5().length && !cfg.idWithoutTop5) return;
      mode = "id"; chosen = [];
      root.classList.add("id-mode");
      $("id-search").hidden = false;
      showChosen();
      status(cfg.idPrompt || "ID visible: press 1–5 for a top-5 class (Shift adds more), or type a name (or /) to search all ID classes, Esc to cancel.");
    }
    function leaveId() {
      mode = "decide"; chosen = [];
      root.classList.remove("id-mode");
      $("id-search").hidden = true;
      idSearch.clear();
      showChosen();
      document.querySelectorAll("#top5 li.picked").forEach((li) => li.classList.remove("picked"));
    }
    function recordChosen() { if (chosen.length) return decide("id", chosen.map((c) => c.wnid), chosen.map((c) => c.label)); }
    function pick(wnid, label, more) {
      if (!chosen.some((c) => c.wnid === wnid)) chosen.push({ wnid, label });
      const li = document.querySelector(`#top5 li[data-wnid="${wnid}"]`);
      if (li) li.classList.add("picked");
      showChosen();
      if (!more) recordChosen();
    }
    const idSearch = window.OODIdSearch(cfg.classesUrl, search, $("results"), (wnid, label, more) => {
      pick(wnid, label, more);
      if (more) idSearch.clear();
    }, (msg) => status(msg, "error"));

    // -- busy, and keys typed meanwhile --------------------------------------------------------------
    async function act(fn) {
      busy = true;
      root.classList.add("saving");
      let ok = false;
      try { ok = (await fn()) !== false; } catch (e) { status(e.message, "error"); } finally {
        busy = false;
        root.classList.remove("saving");
      }
      if (!ok && ahead.length) {
        const lost = ahead.map(describe).join(" ");
        ahead = [];
        const s = $("status");
        status(`${s ? s.textContent : "Not saved."} The ${lost.split(" ").length} key(s) typed after it (${lost}) were not applied.`, "error");
      }
      drain();
      return ok;
    }
    function drain() {
      while (ahead.length && !busy) {
        const k = ahead.shift();
        if (document.activeElement === search && k.key.length === 1) {  // "/" was typed ahead: the rest is the search text
          search.value += k.key;
          search.dispatchEvent(new Event("input"));
          continue;
        }
        dispatch(k);
      }
      if (ahead.length) status(`Saving… ${ahead.length} key(s) typed ahead, applied in order next.`);
    }
    function decide(decision, wnids, labels) {
      leaveId();
      const out = cfg.record(decision, wnids || [], labels || []);
      if (out && typeof out.then === "function") return act(() => out);
      return out;
    }

    // -- keys ----------------------------------------------------------------------------------------
    function toggleHelp(force) { if (help) help.hidden = force === undefined ? !help.hidden : !force; }

    function dispatch(e) {
      if (mode === "id" && search && e.key.length === 1 && /\p{L}/u.test(e.key)) {
        // a letter while choosing the ID class starts the search with it: typing a class name
        // ("espresso", "stop sign", "zebra") must not record O, U, N or S, undo (Z), zoom (F) or
        // toggle gold (G) on the way; Esc, then the key, does those
        e.preventDefault();
        search.value += e.key;
        idSearch.open();
        return;
      }
      if (cfg.before && cfg.before(e, mode)) { e.preventDefault(); return; }
      const key = e.key.toLowerCase();
      if (mode === "id") {
        const digit = /^Digit([1-5])$/.exec(e.code) || /^Numpad([1-5])$/.exec(e.code);
        if (digit) {
          e.preventDefault();
          const t = cfg.top5()[Number(digit[1]) - 1];
          if (t) pick(t.wnid, t.label, e.shiftKey);
          return;
        }
        if (e.key === "/") { e.preventDefault(); idSearch.open(); return; }
        if (e.key === "Enter") { e.preventDefault(); recordChosen(); return; }
        if (e.key === "Escape") { e.preventDefault(); leaveId(); status("ID choice cancelled."); return; }
      }
      const direct = cfg.direct[key];
      if (direct) { e.preventDefault(); if (cfg.top5().length || cfg.idWithoutTop5) decide(direct); return; }
      if (key === "i" && !e.shiftKey) { e.preventDefault(); enterId(); return; }
      const own = cfg.keys && (cfg.keys[e.key] || cfg.keys[key]);
      if (own) {
        e.preventDefault();
        if (mode === "id") leaveId();
        const out = own(e);
        if (out && typeof out.then === "function") act(() => out);
        return;
      }
      if (key === "t" && note) { e.preventDefault(); note.focus(); }
      else if (e.key === "?" && help) { e.preventDefault(); toggleHelp(); }
    }

    document.addEventListener("keydown", (e) => {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      if (help && !help.hidden) { if (e.key === "Escape" || e.key === "?") { toggleHelp(false); e.preventDefault(); } return; }
      if (note && e.target === note) {
        if (e.key === "Enter" || e.key === "Escape") { note.blur(); e.preventDefault(); }
        return;
      }
      if (e.target === search) {
        if (e.key === "ArrowDown" || e.key === "ArrowUp") { e.preventDefault(); idSearch.move(e.key === "ArrowDown" ? 1 : -1); }
        else if (e.key === "Enter") {
          e.preventDefault();
          const c = idSearch.current();
          if (c) { pick(c[0], c[1], e.shiftKey); if (e.shiftKey) idSearch.clear(); } else recordChosen();
        } else if (e.key === "Escape") { e.preventDefault(); search.blur(); }
        return;
      }
      if (e.target && e.target.tagName === "INPUT" && e.target.type !== "checkbox") return;  // other fields type normally
      if (busy) {
        e.preventDefault();
        if (e.repeat) return;
        if (cfg.typeAhead === false) { status(`Still recording the last decision: ${describe(e)} was not taken; press it again when the next image shows.`, "error"); return; }
        if (ahead.length >= MAX_AHEAD) { status(`${MAX_AHEAD} keys are already waiting: ${describe(e)} was not taken.`, "error"); return; }
        ahead.push({ key: e.key, code: e.code, shiftKey: e.shiftKey, preventDefault() {} });
        status(`Saving… ${ahead.length} key(s) typed ahead, applied in order next.`);
        return;
      }
      dispatch(e);
    });
    if (search) {
      search.addEventListener("focus", () => root.classList.add("searching"));
      search.addEventListener("blur", () => root.classList.remove("searching"));
    }
    const top5List = $("top5");
    if (top5List) top5List.addEventListener("click", (ev) => {
      const li = ev.target.closest("li[data-wnid]");
      if (li && mode === "id") pick(li.dataset.wnid, li.querySelector("strong").textContent, ev.shiftKey);
    });
    if (help) {
      const btn = $("help-btn"), close = $("help-close");
      if (btn) btn.addEventListener("click", (ev) => { toggleHelp(); ev.currentTarget.blur(); });
      if (close) close.addEventListener("click", () => toggleHelp(false));
    }
    document.querySelectorAll("button.decide").forEach((b) => b.addEventListener("click", () => {
      b.blur();
      if (busy) { status("Still saving the last decision: click again in a moment.", "error"); return; }
      const d = b.dataset.decision;
      if (d === "id") enterId(); else decide(d);
    }));

    return {
      call, el, status, act, decide, leaveId, enterId,
      mode: () => mode, busy: () => busy, waiting: () => ahead.length,
      run: (fn) => act(fn),
    };
  };
  window.OODScreen.call = call;
  window.OODScreen.el = el;
})();
