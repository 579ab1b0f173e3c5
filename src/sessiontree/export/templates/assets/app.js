// sessiontree serve: copy buttons; on a session page, branch switching without a
// reload, earlier entries and whole texts on demand, and the live view (server-sent
// events). HTML inserted here comes from the server's own escaping templates.
(function () {
  'use strict';

  document.addEventListener('click', function (event) {
    var button = event.target.closest('button.copy');
    if (!button) { return; }
    var text = button.dataset.copy;
    var done = function () {
      var label = button.textContent;
      button.textContent = 'Copied';
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () { button.textContent = 'Copy failed'; });
    }
  });

  var root = document.getElementById('session');
  if (!root) { return; }
  var handle = root.dataset.handle;
  var leaf = root.dataset.leaf;
  var earlier = parseInt(root.dataset.earlier, 10) || 0;
  var later = parseInt(root.dataset.later, 10) || 0;
  var entries = document.getElementById('entries');
  var tree = document.getElementById('tree');
  var picker = document.getElementById('leaf-picker');
  var info = document.getElementById('path-info');
  var earlierButton = document.getElementById('earlier');
  var laterButton = document.getElementById('later');
  var prompts = document.getElementById('prompts');
  var promptList = document.getElementById('prompt-list');
  var notice = document.getElementById('notice');
  var live = document.getElementById('live');
  var base = '/s/' + encodeURIComponent(handle);
  var pathLength = entries.children.length + earlier + later;

  function get(url) {
    return fetch(url, { headers: { 'Accept': 'application/json' } }).then(function (r) {
      if (!r.ok) { throw new Error(r.status + ' ' + r.statusText); }
      return r.json();
    });
  }
  function say(text) { notice.textContent = text; notice.hidden = !text; }
  function showEarlier() {
    earlierButton.hidden = earlier <= 0;
    earlierButton.textContent = 'Show earlier entries (' + earlier.toLocaleString() + ' not shown)';
  }
  function showLater() {
    laterButton.hidden = later <= 0;
    laterButton.textContent = 'Show later entries (' + later.toLocaleString() + ' not shown)';
  }
  function article(id) {
    var found = null;
    entries.querySelectorAll('article.entry').forEach(function (a) { if (a.dataset.id === id) { found = a; } });
    return found;
  }
  function atBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  }
  function toBottom() { window.scrollTo(0, document.body.scrollHeight); }
  function hasOption(id) {
    return Array.prototype.some.call(picker.options, function (o) { return o.value === id; });
  }

  // The picker and the export links follow the shown leaf. A leaf that is no branch tip
  // (an entry picked in the tree) gets an option of its own while it is shown.
  function showLeaf(text) {
    Array.prototype.forEach.call(picker.querySelectorAll('option[data-picked]'), function (o) {
      if (o.value !== leaf) { o.remove(); }
    });
    if (leaf && !hasOption(leaf)) {
      var option = document.createElement('option');
      option.value = leaf;
      option.textContent = text || leaf;
      option.dataset.picked = '1';
      picker.appendChild(option);
    }
    if (leaf) { picker.value = leaf; }
    document.querySelectorAll('.exports a[data-format]').forEach(function (a) {
      a.href = base + '/export/' + a.dataset.format + (leaf ? '?leaf=' + encodeURIComponent(leaf) : '');
    });
  }

  function switchTo(id) {
    if (!id) { return; }
    var url = base + '/path?leaf=' + encodeURIComponent(id) + '&from=' + encodeURIComponent(leaf);
    root.classList.add('loading');
    get(url).then(function (data) {
      var keep = data.ancestor !== null ? article(data.ancestor) : null;
      if (keep) {
        while (keep.nextElementSibling) { keep.nextElementSibling.remove(); }
        entries.insertAdjacentHTML('beforeend', data.html);
      } else {
        entries.innerHTML = data.html;
        earlier = data.earlier;
      }
      later = 0;
      showLater();
      loadPrompts(true);
      leaf = data.leaf || '';
      root.dataset.leaf = leaf;
      pathLength = data.length;
      info.textContent = pathLength.toLocaleString() + ' entries on this path';
      tree.innerHTML = data.nav;
      showLeaf(data.option);
      showEarlier();
      history.replaceState(null, '', base + (leaf ? '?leaf=' + encodeURIComponent(leaf) : ''));
      root.classList.remove('loading');
      toBottom();
    }).catch(function (error) { say('Could not load that branch: ' + error.message); });
  }

  // On a narrow screen the tree is a drawer: the Tree button opens it, a pick closes it.
  var toggle = document.getElementById('tree-toggle');
  function drawer(open) {
    root.classList.toggle('tree-open', open);
    toggle.setAttribute('aria-expanded', open ? 'true' : 'false');
  }
  toggle.addEventListener('click', function () { drawer(!root.classList.contains('tree-open')); });
  document.addEventListener('keydown', function (event) {
    if (event.key === 'Escape') { drawer(false); }
  });

  tree.addEventListener('click', function (event) {
    var button = event.target.closest('button[data-id]');
    if (button) { drawer(false); switchTo(button.dataset.id); }
  });
  picker.addEventListener('change', function () { switchTo(picker.value); });

  // Earlier entries, a chunk per press (the page holds what is shown).
  var loadingEarlier = false;
  earlierButton.addEventListener('click', function () {
    var first = entries.querySelector('article.entry');
    if (!first || loadingEarlier) { return; }
    loadingEarlier = true;
    var url = base + '/path?leaf=' + encodeURIComponent(leaf) + '&before=' + encodeURIComponent(first.dataset.id);
    get(url).then(function (data) {
      entries.insertAdjacentHTML('afterbegin', data.html);
      earlier = data.earlier;
      showEarlier();
      loadingEarlier = false;
    }).catch(function (error) { loadingEarlier = false; say('Could not load earlier entries: ' + error.message); });
  });

  // Later entries, when the page starts at a prompt far from the path's end.
  var loadingLater = false;
  laterButton.addEventListener('click', function () {
    var last = entries.lastElementChild;
    if (!last || loadingLater) { return; }
    loadingLater = true;
    var url = base + '/path?leaf=' + encodeURIComponent(leaf) + '&following=' + encodeURIComponent(last.dataset.id);
    get(url).then(function (data) {
      entries.insertAdjacentHTML('beforeend', data.html);
      later = data.later;
      showLater();
      loadingLater = false;
    }).catch(function (error) { loadingLater = false; say('Could not load later entries: ' + error.message); });
  });

  // The index of the path's prompts, read when it is first opened (and again after a
  // switch of branch); a prompt on the page is scrolled to, any other opens the page
  // from that prompt on (its link).
  var promptsFor = null;
  function loadPrompts(stale) {
    if (stale) { promptsFor = null; }
    if (!prompts.open || promptsFor === leaf) { return; }
    promptsFor = leaf;
    promptList.textContent = 'Reading the prompts…';
    get(base + '/prompts?leaf=' + encodeURIComponent(leaf)).then(function (data) {
      promptList.innerHTML = data.html;
      prompts.querySelector('summary').textContent = 'Prompts on this path (' + data.count.toLocaleString() + ')';
    }).catch(function (error) { promptsFor = null; promptList.textContent = 'Could not read the prompts: ' + error.message; });
  }
  prompts.addEventListener('toggle', function () { loadPrompts(false); });
  promptList.addEventListener('click', function (event) {
    var link = event.target.closest('a[data-id]');
    var shown = link ? article(link.dataset.id) : null;
    if (!shown) { return; }
    event.preventDefault();
    drawer(false);
    shown.scrollIntoView({ block: 'start' });
    shown.classList.add('hit');
    setTimeout(function () { shown.classList.remove('hit'); }, 1500);
  });

  entries.addEventListener('click', function (event) {
    var button = event.target.closest('button.more');
    if (!button) { return; }
    var entry = button.closest('article.entry');
    var url = base + '/text?entry=' + encodeURIComponent(entry.dataset.id) + '&block=' + encodeURIComponent(button.dataset.block);
    button.disabled = true;
    get(url).then(function (data) {
      if (typeof data.html === 'string') {
        button.parentElement.innerHTML = data.html;  // the server's Markdown renderer's
      } else {
        button.parentElement.textContent = data.text;
      }
    }).catch(function (error) { button.disabled = false; say('Could not load the text: ' + error.message); });
  });

  // The live view: the tree takes new branches (redrawn by the server, a moment after
  // the last entry), and "follow the agent" moves to wherever the agent writes next.
  var followAgent = document.getElementById('follow');
  var treeTimer = null;
  function refreshTree() {
    clearTimeout(treeTimer);
    treeTimer = setTimeout(function () {
      var url = base + '/path?leaf=' + encodeURIComponent(leaf) + '&from=' + encodeURIComponent(leaf);
      get(url).then(function (data) { tree.innerHTML = data.nav; }).catch(function () {});
    }, 250);
  }

  var elsewhere = 0;
  if (window.EventSource) {
    var source = new EventSource(base + '/events?from=' + encodeURIComponent(root.dataset.offset));
    source.onopen = function () { live.textContent = 'live'; live.className = 'live on'; };
    source.onerror = function () { live.textContent = 'live: reconnecting…'; live.className = 'live off'; };
    source.addEventListener('entry', function (event) {
      var data = JSON.parse(event.data);
      var follow = atBottom();
      if (data.parentId !== null && hasOption(data.parentId)) {
        Array.prototype.forEach.call(picker.options, function (o) {
          if (o.value === data.parentId) { o.remove(); }
        });
      }
      if (!hasOption(data.id)) {
        var option = document.createElement('option');
        option.value = data.id;
        option.textContent = data.option;
        picker.appendChild(option);
      }
      if (article(data.id)) { return; }
      refreshTree();
      if (data.parentId === leaf && later > 0) {
        later += 1;  // the page does not show the path's end: one more to load
        leaf = data.id;
        root.dataset.leaf = leaf;
        picker.value = leaf;
        pathLength += 1;
        showLater();
      } else if (data.parentId === leaf) {
        entries.insertAdjacentHTML('beforeend', data.html);
        var added = entries.lastElementChild;
        added.classList.add('fresh');
        leaf = data.id;
        root.dataset.leaf = leaf;
        picker.value = leaf;
        pathLength += 1;
        info.textContent = pathLength.toLocaleString() + ' entries on this path';
        if (follow) { toBottom(); }
      } else if (followAgent && followAgent.checked) {
        switchTo(data.id);
      } else {
        elsewhere += 1;
        say(elsewhere + ' new entr' + (elsewhere === 1 ? 'y' : 'ies') + ' on other branches (pick them in the branch list).');
      }
    });
    source.addEventListener('rewritten', function () {
      source.close();
      live.textContent = 'not live'; live.className = 'live off';
      say('The session file was rewritten or replaced: reload the page to see it as it is now.');
    });
  } else {
    live.textContent = '';
  }

  showEarlier();
  showLater();
  // A search hit: its entry, inside its whole branch, scrolled to and highlighted.
  var focus = root.dataset.focus ? article(root.dataset.focus) : null;
  if (focus) {
    focus.classList.add('hit');
    focus.scrollIntoView({ block: 'center' });
  } else {
    toBottom();
  }
})();
