"""The search page at ``GET /``: a query box, results with key, pages, a snippet with the
matched terms marked, and the image of each page behind a hit with the hit's text
highlighted on it (the page endpoint draws the hit's boxes: ``?chunk=<hit id>``).

The page is static; it calls the API with the key the user gives it (kept in the browser's
session storage). An address with the key in its fragment (``/#key=...``) fills the key in:
browsers never send a fragment to a server, so the key never reaches a log.
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Knowledge base search</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem; color: #222; }
 form { display: flex; gap: .5rem; flex-wrap: wrap; }
 input[type=search] { flex: 1 1 30rem; font-size: 1.1rem; padding: .4rem; }
 input[type=password] { width: 14rem; }
 ol { padding-left: 1.2rem; } li { margin: 1rem 0; }
 .key { font-weight: 600; } .meta { color: #666; font-size: .9rem; }
 mark { background: #ffe58a; } .error { color: #a00; } img.page { max-width: 100%; border: 1px solid #ccc; margin-top: .5rem; }
</style>
</head>
<body>
<h1>Knowledge base search</h1>
<form id="search">
  <input type="search" id="query" name="query" placeholder="Ask a question" required maxlength="2000" autofocus>
  <select id="mode" name="mode"><option>hybrid</option><option>dense</option><option>sparse</option></select>
  <input type="password" id="key" placeholder="API key" autocomplete="off">
  <button type="submit" id="go">Search</button>
</form>
<p id="status" class="meta"></p>
<ol id="results"></ol>
<script>
const keyBox = document.getElementById("key");
const fromFragment = new URLSearchParams(location.hash.slice(1)).get("key");
if (fromFragment) { sessionStorage.setItem("kbKey", fromFragment); history.replaceState(null, "", location.pathname); }
keyBox.value = sessionStorage.getItem("kbKey") || "";
function headers() { sessionStorage.setItem("kbKey", keyBox.value); return {"Authorization": "Bearer " + keyBox.value}; }
function text(tag, value, cls) { const e = document.createElement(tag); e.textContent = value; if (cls) e.className = cls; return e; }
async function showPage(hit, n, link, item) {
  const resp = await fetch(hit.page_urls[n], {headers: headers()});
  if (!resp.ok) { item.appendChild(text("p", "page image: HTTP " + resp.status, "error")); return; }
  const img = document.createElement("img");
  img.className = "page"; img.alt = hit.key + " page " + hit.pages[n] + ", the hit highlighted";
  img.dataset.page = hit.pages[n];
  img.src = URL.createObjectURL(await resp.blob());
  item.appendChild(img); link.remove();
}
document.getElementById("search").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const status = document.getElementById("status"), list = document.getElementById("results");
  list.replaceChildren(); status.textContent = "searching...";
  const body = {query: document.getElementById("query").value, mode: document.getElementById("mode").value, top_k: 10};
  const resp = await fetch("/v1/search", {method: "POST", headers: {...headers(), "Content-Type": "application/json"},
                                          body: JSON.stringify(body)});
  const data = await resp.json();
  if (!resp.ok) { status.textContent = data.error.code + ": " + data.error.message; status.className = "error"; return; }
  status.className = "meta";
  status.textContent = data.hits.length + " result(s) in " + data.took_ms + " ms";
  for (const hit of data.hits) {
    const item = document.createElement("li");
    item.className = "hit"; item.dataset.key = hit.key; item.dataset.pages = hit.pages.join(",");
    item.appendChild(text("div", hit.key, "key"));
    item.appendChild(text("div", "page " + hit.pages.join(", ") + (hit.section ? " · " + hit.section : "") +
                                  " · score " + hit.score, "meta"));
    const snip = document.createElement("p"); snip.className = "snippet"; snip.innerHTML = hit.snippet_html;
    item.appendChild(snip);
    hit.page_urls.forEach((url, n) => {
      const link = text("a", "show page " + hit.pages[n], "page-link"); link.href = "#"; link.dataset.page = hit.pages[n];
      link.addEventListener("click", (e) => { e.preventDefault(); showPage(hit, n, link, item); });
      item.appendChild(link); item.appendChild(document.createTextNode(" "));
    });
    list.appendChild(item);
  }
});
</script>
</body>
</html>
"""
