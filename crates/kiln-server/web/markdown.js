// The chat page's markdown: paragraphs, headings, lists, block quotes, rules,
// fenced code (with a copy button), inline code, bold, italic and links.
// Every piece of text is HTML-escaped before any tag is added, and a link
// keeps only http(s) and mailto targets, so model output can never inject
// markup or script into the page.
"use strict";
(function () {
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

  // Runs on escaped text: what it inserts are the only tags in the output.
  function emphasis(escaped) {
    let s = escaped.replace(/\[([^\]\n]+)\]\(([^()\s]+)\)/g, (m, label, url) =>
      /^(https?:\/\/|mailto:)/i.test(url) ? `<a href="${url}" target="_blank" rel="noopener noreferrer">${label}</a>` : m);
    s = s.replace(/\*\*(?=\S)([^*]*?\S)\*\*/g, "<strong>$1</strong>");
    s = s.replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\w)/g, "$1<em>$2</em>");
    s = s.replace(/(^|[^\w&])_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>");
    return s;
  }

  // Code spans first (their content is literal), emphasis between them.
  function inline(src) {
    let out = "";
    let i = 0;
    while (i < src.length) {
      const tick = src.indexOf("`", i);
      if (tick < 0) break;
      let n = 1;
      while (src[tick + n] === "`") n++;
      const end = src.indexOf("`".repeat(n), tick + n);
      if (end < 0) break;
      out += emphasis(esc(src.slice(i, tick))) + "<code>" + esc(src.slice(tick + n, end)) + "</code>";
      i = end + n;
    }
    return out + emphasis(esc(src.slice(i)));
  }

  function codeBlock(lang, code) {
    return '<div class="code"><div class="code-head"><span>' + esc(lang) +
      '</span><button type="button" class="copy" aria-label="Copy code">Copy</button></div><pre><code>' +
      esc(code) + "</code></pre></div>";
  }

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const ITEM = /^ {0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const QUOTE = /^ {0,3}>\s?(.*)$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;

  function blocks(lines) {
    let html = "";
    let para = [];
    const flush = () => {
      if (para.length) html += "<p>" + inline(para.join("\n")).replace(/\n/g, "<br>") + "</p>";
      para = [];
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if ((m = FENCE.exec(line))) {
        flush();
        const fence = m[1];
        const body = [];
        i++;
        // An unclosed fence (a stream still running) runs to the end.
        while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
        i++;
        html += codeBlock(m[2], body.join("\n"));
      } else if (!line.trim()) {
        flush();
        i++;
      } else if (RULE.test(line)) {
        flush();
        html += "<hr>";
        i++;
      } else if ((m = HEADING.exec(line))) {
        flush();
        const level = Math.min(6, m[1].length + 2);
        html += `<h${level}>` + inline(m[2]) + `</h${level}>`;
        i++;
      } else if (QUOTE.test(line)) {
        flush();
        const body = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
          body.push(m[1]);
          i++;
        }
        html += "<blockquote>" + blocks(body) + "</blockquote>";
      } else if ((m = ITEM.exec(line))) {
        flush();
        const ordered = /\d/.test(m[1]);
        const start = ordered ? parseInt(m[1], 10) : 1;
        const items = [];
        while (i < lines.length) {
          const it = ITEM.exec(lines[i]);
          if (it && /\d/.test(it[1]) === ordered) {
            items.push([it[2]]);
          } else if (items.length && /^\s{2,}\S/.test(lines[i])) {
            items[items.length - 1].push(lines[i].trim());
          } else {
            break;
          }
          i++;
        }
        const tag = ordered ? "ol" : "ul";
        const attr = ordered && start !== 1 ? ` start="${start}"` : "";
        html += `<${tag}${attr}>` + items.map((t) => "<li>" + inline(t.join("\n")).replace(/\n/g, "<br>") + "</li>").join("") + `</${tag}>`;
      } else {
        para.push(line);
        i++;
      }
    }
    flush();
    return html;
  }

  function render(src) {
    return blocks(String(src).replace(/\r\n?/g, "\n").split("\n"));
  }

  window.kilnMarkdown = { render, esc };
})();
