// Sortable tables: click a header of a table.sortable to sort by that column (numbers as
// numbers, empty cells last); click again to reverse. The first click puts the best first:
// headers say data-better="high" (AUROC, AUPR) or "low" (FPR, failures; the default for
// names: A to Z). Cells may carry data-sort to sort by.
(function () {
  function value(cell) {
    const raw = (cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent).trim();
    if (raw === "") return null;
    const n = Number(raw.replace(/%$/, ""));
    return Number.isNaN(n) ? raw.toLowerCase() : n;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, col) {
      th.classList.add("sort-header");
      th.title = "Sort by " + th.textContent.trim() + (th.dataset.better === "high" ? " (highest first)" : th.dataset.better === "low" ? " (lowest first)" : "");
      th.addEventListener("click", function () {
        const body = table.tBodies[0];
        const asc = th.dataset.dir ? th.dataset.dir !== "asc" : th.dataset.better !== "high";
        table.querySelectorAll("thead th").forEach(function (h) { delete h.dataset.dir; });
        th.dataset.dir = asc ? "asc" : "desc";
        const rows = Array.from(body.rows);
        rows.sort(function (a, b) {
          const x = value(a.cells[col]), y = value(b.cells[col]);
          if (x === null && y === null) return 0;
          if (x === null) return 1;
          if (y === null) return -1;
          if (x < y) return asc ? -1 : 1;
          if (x > y) return asc ? 1 : -1;
          return 0;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.querySelectorAll("select[data-bars]").forEach(function (select) {
    const img = document.getElementById(select.dataset.bars);
    select.addEventListener("change", function () { img.src = select.value; });
  });
})();
