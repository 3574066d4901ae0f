// The kernel's and the model's attacks on a person's Jupyter client (issue
// 21), shared by jupyterlab_untrusted.js and notebook_untrusted.js: what a
// payload does when it runs (a window flag and a contents-API PUT of
// PWNED-NAME.txt), the kernel-side helpers that build payloads, and the
// table of variants, each a cell the person runs.
'use strict';

// What every payload does when it runs: a window flag and a contents-API PUT.
const JS = 'window.__pwned = (window.__pwned || []).concat(["NAME"]); ' +
  'fetch("/api/contents/PWNED-NAME.txt", {method: "PUT", headers: {"Content-Type": "application/json", ' +
  '"X-XSRFToken": (document.cookie.match(/_xsrf=([^;]+)/) || [])[1]}, ' +
  'body: JSON.stringify({type: "file", format: "text", content: "pwned"})});';
const js = name => JS.replace(/NAME/g, name);
const HELPERS = `import base64, threading, time
from IPython.display import display, update_display, HTML, Javascript, Markdown, SVG
def _korch_js(name):
    return base64.b64decode("${Buffer.from(JS).toString('base64')}").decode().replace("NAME", name)
def _korch_img(name):
    return '<img src=x onerror="eval(atob(\`%s\`))">' % base64.b64encode(_korch_js(name).encode()).decode()
print("HELPERS")`;

// [name, the cell, what the person then runs (or null)]
const VARIANTS = [
  ['display_pub', `_p = get_ipython().display_pub.publish
def _pub(data, metadata=None, **kw):
    return _p(dict(data, **{"text/html": _korch_img("display_pub")}), metadata, **kw)
get_ipython().display_pub.publish = _pub`, 'display("the person\'s own display")\nget_ipython().display_pub.publish = _p'],
  ['displayhook', `_w = get_ipython().displayhook.write_format_data
def _wf(fd, md=None):
    return _w(dict(fd, **{"text/html": "<script>" + _korch_js("displayhook") + "</script>"}), md)
get_ipython().displayhook.write_format_data = _wf`, '6 * 7'],
  ['thread', `threading.Thread(target=lambda: (time.sleep(0.8), display(HTML("<script>" + _korch_js("thread") + "</script>late"))),
                 daemon=True).start()`, 'time.sleep(1.6)\nget_ipython().displayhook.write_format_data = _w'],
  ['javascript', 'display(Javascript(_korch_js("javascript")))', null],
  ['execute_result_html', 'HTML("<b>result</b><script>" + _korch_js("execute_result") + "</script>")', null],
  ['update_display', 'update_display(HTML(_korch_img("update_display")), display_id="mine")', null],
  ['widget_html', 'import ipywidgets as _w8\n_w8.HTML(_korch_img("widget"))', null],
  ['magic_javascript', `%%javascript\n${js('magic_javascript')}`, null],
  ['magic_html', `%%html\n<b>magic</b><script>${js('magic_html')}</script>`, null],
  ['markdown', 'Markdown(_korch_img("markdown") + " [link](javascript:" + _korch_js("markdown_link") + ")")', null],
  ['svg', `SVG('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20"><script>' + _korch_js("svg") + '</script><circle r="9" cx="10" cy="10"/></svg>')`, null],
];

async function korchJson(korch, method, p, body) {
  const r = await fetch(`${korch.base}${p}`, { method, headers: { Authorization: `token ${korch.token}`,
    'Content-Type': 'application/json' }, body: body ? JSON.stringify(body) : undefined });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* a stream */ }
  return { status: r.status, json, text };
}


module.exports = { JS, js, HELPERS, VARIANTS, korchJson };
