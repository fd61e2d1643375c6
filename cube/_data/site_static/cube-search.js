/* Search with snippets from the build's own text of each page, over file:// and http alike.
 *
 * Sphinx's search shows each result's snippet by fetch()ing the result's page; a page opened
 * from disk may not fetch another file (Chromium: "Cross origin requests are only supported for
 * ..."), so over file:// the results came without snippets and with a console error each. On
 * the search page this script loads the text of every page, which the build wrote beside it
 * (_static/cube-search-pages.js, cube.paper.sphinx_extension.search_text: prose and outputs,
 * no notebook source), and answers those fetches from it, whether the site is opened as files
 * or served.
 */
(function () {
  // Served over http(s) too: the snippet Sphinx makes from the fetched page held a notebook
  // cell's Python source (a search for "McNemar", issue 47); the build's text leaves it out.
  var root = new URL(document.documentElement.dataset.content_root || "./", location.href).href;
  var onSearchPage = new URL("search.html", root).href === location.href.split(/[?#]/)[0];
  if (!onSearchPage || !window.fetch) { return; }
  var loaded = new Promise(function (resolve) {
    var script = document.createElement("script");
    script.src = root + "_static/cube-search-pages.js";
    script.onload = function () { resolve(window.CUBE_SEARCH_PAGES || {}); };
    script.onerror = function () { resolve({}); };
    document.head.appendChild(script);
  });
  var original = window.fetch.bind(window);
  window.fetch = function (input, init) {
    var url = new URL(typeof input === "string" ? input : input.url, location.href).href.split(/[?#]/)[0];
    if (url.indexOf(root) !== 0) { return original(input, init); }
    var page = url.slice(root.length);
    return loaded.then(function (pages) {
      if (Object.prototype.hasOwnProperty.call(pages, page)) {
        return new Response(pages[page], {status: 200, headers: {"Content-Type": "text/html; charset=utf-8"}});
      }
      return original(input, init);
    });
  };
})();
