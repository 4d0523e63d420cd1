// The Work Contract form (templates/dashboard/_contract_form.html), enhanced; no dependencies.
// Without this script the form still works: every repeated member shows one blank row,
// and blank rows are dropped when the form is read.

// "Add a deliverable" and the like copy their fieldset's <template> row, giving it the
// next free index, so that its inputs post as deliverables-<index>-id and so on.
for (const button of document.querySelectorAll("button[data-add-row]")) {
  button.hidden = false;
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-add-row]");
  if (!button) {
    return;
  }
  const template = button.closest("fieldset").querySelector("template[data-row-template]");
  const index = Number(template.dataset.nextIndex);
  template.dataset.nextIndex = index + 1;
  template.insertAdjacentHTML("beforebegin", template.innerHTML
    .replaceAll("__index__", index).replaceAll("__number__", index + 1));
  template.previousElementSibling.querySelector("input, textarea, select").focus();
});

// Typing in the raw JSON chooses it as what is sent, so that edits there are not lost by
// sending the form instead.
document.addEventListener("input", (event) => {
  if (event.target.name !== "contract_json") {
    return;
  }
  const choice = event.target.form?.querySelector("input[name=editor][value=json]");
  if (choice) {
    choice.checked = true;
  }
});
