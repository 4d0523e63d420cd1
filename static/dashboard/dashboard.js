// MissionWeave dashboard: a little progressive enhancement, no dependencies.
// Forms with data-confirm ask first; any action form disables its button once sent,
// so a double click cannot send the command twice.
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
    return;
  }
  for (const button of form.querySelectorAll("button[type=submit]")) {
    button.disabled = true;
  }
});
