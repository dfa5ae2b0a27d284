// The image browser's selection: tick thumbnails (Shift-click ticks a range), or the whole page.
(function () {
  "use strict";
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
