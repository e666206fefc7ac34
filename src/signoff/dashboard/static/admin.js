// signoff admin pages: copy buttons for secrets shown once. Without this file the
// secret is plain text that a click selects whole (CSS user-select: all).
(function () {
  "use strict";

  function copy(button) {
    var value = document.querySelector('[data-testid="' + button.getAttribute("data-copy") + '"]');
    if (!value) { return; }
    var text = value.textContent;
    var done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { select(value); });
    } else {
      select(value);
      if (document.execCommand && document.execCommand("copy")) { done(); }
    }
  }

  function select(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function reveal(root) {
    var buttons = root.querySelectorAll("[data-copy]");
    for (var i = 0; i < buttons.length; i++) { buttons[i].hidden = false; }
  }

  document.addEventListener("DOMContentLoaded", function () { reveal(document); });
  // The inbox's live list arrives whole from the server: its buttons are shown again.
  document.addEventListener("signoff:updated", function (event) { reveal(event.target); });
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (button) { copy(button); }
  });
})();
