// Sortable columns: a click on a header of a table.mp-sortable sorts its rows by that
// column (numbers as numbers), a second click reverses. Without JavaScript the table
// stays in the server's order.
document.querySelectorAll('table.mp-sortable').forEach(table => {
  const heads = table.querySelectorAll('thead th');
  heads.forEach((th, index) => {
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'mp-sort';
    button.textContent = th.textContent;
    th.textContent = '';
    th.appendChild(button);
    th.setAttribute('aria-sort', 'none');
    button.addEventListener('click', () => {
      const ascending = th.getAttribute('aria-sort') !== 'ascending';
      heads.forEach(h => h.setAttribute('aria-sort', 'none'));
      th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
      const body = table.tBodies[0];
      const rows = [...body.rows];
      const text = row => (row.cells[index] ? row.cells[index].textContent.trim() : '');
      rows.sort((a, b) => text(a).localeCompare(text(b), undefined, {numeric: true}) * (ascending ? 1 : -1));
      rows.forEach(row => body.appendChild(row));
    });
  });
});
