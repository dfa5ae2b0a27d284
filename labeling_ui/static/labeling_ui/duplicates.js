// The duplicate-group page's keys (shown on the page): ← → or J K move between the members,
// C says the search got the group right (and opens the next group needing attention),
// X / O / U press the focused member's "Not a duplicate" / "Keep this one instead" / "Undo the
// correction" (only the buttons the member offers), E types its note (Esc leaves the note),
// N / P open the next / previous group that still needs attention. Keys do nothing while typing.
(function () {
  "use strict";
  const box = document.getElementById("members");
  if (!box) return;
  const members = [...box.querySelectorAll(".member")];
  if (!members.length) return;
  let at = Math.max(0, members.findIndex((m) => m.dataset.image === box.dataset.focus));
  function focus(i, scroll = true) {
    at = Math.min(members.length - 1, Math.max(0, i));
    members.forEach((m, j) => m.classList.toggle("focused", j === at));
    members[at].focus({ preventScroll: true });
    if (scroll) members[at].scrollIntoView({ block: "nearest" });
  }
  // on opening, the page stays at its top unless the focused member starts below the fold (a
  // member taller than what is left of the window would otherwise scroll the page a few pixels)
  focus(at, members[at].getBoundingClientRect().top > window.innerHeight - 80);
  members.forEach((m, i) => m.addEventListener("click", (e) => { if (!e.target.closest("a, button, input")) focus(i); }));
  members.forEach((m) => {
    const note = m.querySelector("input[name=note]");
    if (note) note.addEventListener("keydown", (e) => { if (e.key === "Escape") { e.preventDefault(); note.blur(); m.focus({ preventScroll: true }); } });
  });
  let sent = false;
  const go = (id) => { const a = document.getElementById(id); if (a) a.click(); };
  document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || e.target.closest("input, textarea, select")) return;
    const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    const m = members[at];
    if (key === "ArrowRight" || key === "j") { e.preventDefault(); focus(at + 1); return; }
    if (key === "ArrowLeft" || key === "k") { e.preventDefault(); focus(at - 1); return; }
    if (key === "c") {
      const confirm = document.getElementById("confirm-group");
      if (confirm && !sent) { e.preventDefault(); sent = true; confirm.click(); }
      return;
    }
    if (key === "n") { e.preventDefault(); go("next-open"); return; }
    if (key === "p") { e.preventDefault(); go("prev-open"); return; }
    if (key === "e") {
      const note = m.querySelector("input[name=note]");
      if (note) { e.preventDefault(); note.focus(); }
      return;
    }
    const button = m.querySelector(`button[data-key="${key}"]`);
    if (button && !sent) {
      e.preventDefault();
      sent = true;  // one key, one correction: keys typed while the page reloads do nothing
      button.click();
    }
  });
})();
