/* skillbook: the ipywidgets runtime (html-manager 1.x) in a static book served with MathJax 3.
   Loaded between require.js and html-manager/embed-amd.js (nb_ipywidgets_js in _config.yml). */
(function () {
  "use strict";
  // Fonts: html-manager finds its font files next to the URL of its AMD module, which require.js
  // derives from the module's name relative to the page (runs/<profile>/@jupyter-widgets/..., a 404).
  // Name the folder where the build put them.
  var root = document.documentElement.dataset.content_root;
  if (root === undefined) {
    var me = document.currentScript && document.currentScript.getAttribute("src");
    root = me ? me.replace(/_static\/skillbook-widgets\.js.*$/, "") : "";
  }
  if (window.require && window.require.config) {
    window.require.config({paths: {"@jupyter-widgets/html-manager/dist": root + "_static/html-manager"}});
  }
  // MathJax: widgets typeset their labels with MathJax 2's MathJax.Hub.Queue(["Typeset", hub, el]);
  // MathJax 3 has no Hub (TypeError ... 'Queue'). Before MathJax 3 is ready it typesets the whole page
  // itself; afterwards typesetPromise does the one element.
  var hub = {
    Queue: function (job) {
      var mj = window.MathJax, el = job && job[2];
      if (el && mj && mj.typesetPromise && mj.startup && mj.startup.promise) {
        mj.startup.promise.then(function () { return mj.typesetPromise([el]); }).catch(function () {});
      }
    }
  };
  var config = window.MathJax = window.MathJax || {};
  config.Hub = hub;
  var startup = config.startup = config.startup || {};
  var ready = startup.ready;
  startup.ready = function () {
    if (ready) { ready(); } else { window.MathJax.startup.defaultReady(); }
    window.MathJax.Hub = hub;   // MathJax 3 replaced the configuration object with itself
  };
})();
