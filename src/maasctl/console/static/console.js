// MaaS console: progressive enhancement only; every page works without it.
"use strict";
document.addEventListener("click", (event) => {
  const copy = event.target.closest("[data-copy]");
  if (copy) {
    const source = document.getElementById(copy.dataset.copy);
    const text = source ? source.textContent : "";
    const done = () => { copy.textContent = "Copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => selectText(source));
    } else {
      selectText(source);
    }
    return;
  }
  const add = event.target.closest("[data-add-row]");
  if (add) {
    const template = document.getElementById(add.dataset.addRow);
    const body = document.getElementById(add.dataset.into);
    if (template && body) {
      const index = body.querySelectorAll("tr").length;
      const html = template.innerHTML.replaceAll("__i__", String(index));
      body.insertAdjacentHTML("beforeend", html);
      const first = body.lastElementChild && body.lastElementChild.querySelector("input");
      if (first) first.focus();
    }
    return;
  }
  const open = event.target.closest("[data-open-dialog]");
  if (open) {
    const dialog = document.getElementById(open.dataset.openDialog);
    if (dialog && dialog.showModal) {
      event.preventDefault();
      dialog.showModal();
    }
    return;
  }
  const close = event.target.closest("[data-close-dialog]");
  if (close) {
    const dialog = close.closest("dialog");
    if (dialog) dialog.close();
  }
});
document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) {
    event.preventDefault();
    return;
  }
  const dialog = event.target.closest("dialog");
  if (dialog && event.target.method === "get") setTimeout(() => dialog.close(), 0);
});
function selectText(node) {
  if (!node) return;
  const range = document.createRange();
  range.selectNodeContents(node);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}
