(function () {
  var data = JSON.parse(document.getElementById('session-data').textContent);
  var parents = data.parents, articles = {}, buttons = {};
  document.querySelectorAll('article.entry').forEach(function (a) { articles[a.dataset.n] = a; });
  document.querySelectorAll('nav button[data-n]').forEach(function (b) {
    buttons[b.dataset.n] = b;
  });
  var picker = document.getElementById('leaf-picker');
  function show(n) {
    var path = [], seen = {}, cur = n;
    while (cur !== null && cur !== undefined && !seen[cur]) {
      seen[cur] = 1; path.push(String(cur)); cur = parents[cur];
    }
    path.reverse();
    var order = {};
    path.forEach(function (m, i) { order[m] = i; });
    Object.keys(articles).forEach(function (m) {
      var a = articles[m], on = Object.prototype.hasOwnProperty.call(order, m);
      a.hidden = !on; a.style.order = on ? order[m] : '';
    });
    Object.keys(buttons).forEach(function (m) {
      buttons[m].classList.toggle('on-path', Object.prototype.hasOwnProperty.call(order, m));
      buttons[m].classList.toggle('selected', m === String(n));
    });
    if (picker) { picker.value = String(n); }
    document.getElementById('path-info').textContent = path.length + ' entries on this path';
  }
  Object.keys(buttons).forEach(function (m) {
    buttons[m].addEventListener('click', function () { show(m); });
  });
  if (picker) { picker.addEventListener('change', function () { show(picker.value); }); }
  if (data.leaf !== null) { show(String(data.leaf)); }
})();
