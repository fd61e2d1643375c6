/* The ☰ and table-of-contents toggles of the page header.
 *
 * pydata-sphinx-theme (which opens the navigation as a dialog below 992 px) and
 * sphinx-book-theme (which folds the sidebar away above it) both bind their click handler to
 * the FIRST `.primary-toggle` / `.secondary-toggle` of the page: the pydata header's button,
 * which the book theme hides (zero width). The visible buttons of the article header therefore
 * did nothing at any width. Each visible toggle forwards its click to that first button, so the
 * themes' own handlers run: below 992 px the navigation opens, above it the sidebar toggles.
 */
(function () {
  function forward(selector) {
    var all = document.querySelectorAll(selector);
    if (all.length < 2) { return; }
    var bound = all[0];
    Array.prototype.slice.call(all, 1).forEach(function (button) {
      button.addEventListener("click", function (event) {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    });
  }
  function setup() { forward(".primary-toggle"); forward(".secondary-toggle"); }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setup);
  } else {
    setup();
  }
})();
