// The image browser's selection: tick thumbnails (Shift-click ticks a range), or the whole page; and
// the reason box of the exclude action.
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
  // a note on the duplicate-group page is not a decision: Enter there submits nothing
  document.querySelectorAll(".member input[name=note]").forEach((input) => input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") e.preventDefault();
  }));
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
