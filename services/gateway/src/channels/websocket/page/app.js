// The nanobot web chat: one WebSocket multiplexing every chat, history from the gateway's
// log, a small Markdown renderer that only ever creates elements and text nodes (model text
// never reaches innerHTML).
"use strict";

(() => {
  const BASE = document.body.dataset.base || "";
  const KEY = "nanobot.";
  const load = (k, d) => { try { return JSON.parse(localStorage.getItem(KEY + k)) ?? d; } catch { return d; } };
  const save = (k, v) => localStorage.setItem(KEY + k, JSON.stringify(v));
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const randomId = (prefix) => {
    const bytes = new Uint8Array(8);
    crypto.getRandomValues(bytes);
    return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  };

  // --- state -------------------------------------------------------------------------
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("token")) {
    save("token", fragment.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  let token = load("token", "");
  const clientId = load("client", "") || randomId("web-");
  save("client", clientId);
  let chats = load("chats", []); // [{id, title}]
  let current = load("current", "");
  let outbox = load("outbox", []); // messages not yet accepted: [{chat, id, text}]
  const state = new Map(); // chat id -> {items: [], lastId, loaded}
  let ws = null;
  let backoff = 500;

  const chatState = (id) => {
    if (!state.has(id)) state.set(id, { items: [], lastId: "0-0", loaded: false });
    return state.get(id);
  };

  // --- Markdown (safe: elements and text nodes only) ----------------------------------
  const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([\s\S]+?)\*\*|\[([^\]\n]+)\]\(([^)\s]+)\)|\*([^*\s][^*\n]*?)\*|\b_([^_\s][^_\n]*?)_\b/g;

  function safeUrl(href) {
    try {
      const url = new URL(href, location.href);
      return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
    } catch { return null; }
  }

  function inline(text, parent) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
      if (m[1] !== undefined) {
        parent.append(el("code", "", m[2]));
      } else if (m[3] !== undefined) {
        const strong = el("strong");
        inline(m[3], strong);
        parent.append(strong);
      } else if (m[4] !== undefined) {
        const href = safeUrl(m[5]);
        if (href) {
          const a = el("a");
          a.href = href;
          a.rel = "noopener noreferrer";
          a.target = "_blank";
          inline(m[4], a);
          parent.append(a);
        } else {
          parent.append(document.createTextNode(m[0]));
        }
      } else {
        const em = el("em");
        inline(m[6] ?? m[7], em);
        parent.append(em);
      }
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
  }

  function markdown(text) {
    const out = document.createDocumentFragment();
    const lines = text.replace(/\r\n?/g, "\n").split("\n");
    let para = null;
    let list = null;
    const endBlocks = () => { para = null; list = null; };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = /^\s*(```|~~~)\s*([\w+-]*)\s*$/.exec(line);
      if (fence) {
        endBlocks();
        const body = [];
        for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) body.push(lines[i]);
        const pre = el("pre");
        const code = el("code", fence[2] ? "language-" + fence[2] : "", body.join("\n"));
        pre.append(code);
        out.append(pre);
        continue;
      }
      if (!line.trim()) { endBlocks(); continue; }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      if (heading) {
        endBlocks();
        const h = el("h" + Math.min(6, heading[1].length + 2));
        inline(heading[2], h);
        out.append(h);
        continue;
      }
      const item = /^\s*([-*+]|\d+[.)])\s+(.*)$/.exec(line);
      if (item) {
        para = null;
        const tag = /\d/.test(item[1]) ? "ol" : "ul";
        if (!list || list.tagName.toLowerCase() !== tag) {
          list = el(tag);
          out.append(list);
        }
        const li = el("li");
        inline(item[2], li);
        list.append(li);
        continue;
      }
      const quote = /^>\s?(.*)$/.exec(line);
      if (quote) {
        endBlocks();
        const q = el("blockquote");
        inline(quote[1], q);
        out.append(q);
        continue;
      }
      list = null;
      if (!para) {
        para = el("p");
        out.append(para);
      } else {
        para.append(el("br"));
      }
      inline(line, para);
    }
    return out;
  }

  // --- rendering ----------------------------------------------------------------------
  function node(item) {
    switch (item.kind) {
      case "user": {
        const div = el("div", "msg user" + (item.pending ? " pending" : ""), item.text);
        div.dataset.msgId = item.msgId;
        return div;
      }
      case "stream":
      case "final": {
        const div = el("div", "msg assistant" + (item.kind === "stream" ? " streaming" : ""));
        div.append(markdown(item.text));
        if (item.streamed) div.dataset.streamed = "true";
        return div;
      }
      case "tool_hint": {
        const details = el("details", "tool-hint");
        details.append(el("summary", "", "Tool call"), el("pre", "", item.text));
        return details;
      }
      case "progress":
        return el("div", "msg progress", item.text);
      default:
        return el("div", "msg error", item.text);
    }
  }

  function render() {
    const box = $("messages");
    box.replaceChildren(...chatState(current).items.map(node));
    box.scrollTop = box.scrollHeight;
    const list = $("chats");
    list.replaceChildren(...chats.map((c) => {
      const li = el("li", c.id === current ? "active" : "", c.title || "New chat");
      li.dataset.chatId = c.id;
      li.addEventListener("click", () => switchTo(c.id));
      return li;
    }));
  }

  function changed(chat) {
    if (chat === current) render();
  }

  // --- chats --------------------------------------------------------------------------
  function addChat(id) {
    if (!chats.some((c) => c.id === id)) {
      chats.unshift({ id, title: "" });
      save("chats", chats);
    }
  }

  async function switchTo(id) {
    current = id;
    save("current", id);
    addChat(id);
    render();
    await loadHistory(id);
  }

  async function loadHistory(id) {
    const st = chatState(id);
    if (st.loaded) return;
    const q = new URLSearchParams({ chat_id: id, client_id: clientId });
    const res = await fetch(`${BASE}/history?${q}`, { headers: { Authorization: "Bearer " + token } });
    if (res.status === 401 || res.status === 403) {
      showLogin(res.status === 401 ? "Wrong token." : "This client is not allowed (allowFrom).");
      throw new Error("refused");
    }
    if (!res.ok) throw new Error("history: " + res.status);
    const body = await res.json();
    if (st.loaded) return;
    st.loaded = true;
    for (const frame of body.entries) onEntry(id, frame);
    changed(id);
  }

  // --- protocol -----------------------------------------------------------------------
  // Entry ids are `<ms>-<seq>`: compares two of them.
  const newer = (a, b) => {
    const [am, an] = a.split("-").map(BigInt);
    const [bm, bn] = b.split("-").map(BigInt);
    return am > bm || (am === bm && an > bn);
  };

  function onEntry(chat, f) {
    const st = chatState(chat);
    if (f.id) {
      if (!newer(f.id, st.lastId)) return;
      st.lastId = f.id;
    }
    if (f.event === "user_message") {
      const mine = st.items.find((it) => it.kind === "user" && it.msgId === f.msg_id);
      if (mine) { mine.pending = false; return; }
      st.items.push({ kind: "user", text: f.text, msgId: f.msg_id });
      const c = chats.find((c) => c.id === chat);
      if (c && !c.title) { c.title = f.text.slice(0, 40); save("chats", chats); }
      return;
    }
    const streams = st.items.filter((it) => it.kind === "stream" && it.streamId === f.reply_to && f.reply_to);
    if (f.kind === "final") {
      st.items = st.items.filter((it) => !streams.includes(it));
      st.items.push({ kind: "final", text: f.text, streamed: streams.length > 0 });
      return;
    }
    const ended = streams.find((it) => it.ended);
    const entry = { kind: f.kind, text: f.text };
    if (f.kind === "progress" && ended) st.items.splice(st.items.indexOf(ended), 1, entry);
    else st.items.push(entry);
  }

  function onFrame(f) {
    const chat = f.chat_id;
    switch (f.event) {
      case "ready":
      case "attached":
        return;
      case "accepted": {
        outbox = outbox.filter((m) => m.id !== f.msg_id);
        save("outbox", outbox);
        const mine = chatState(chat).items.find((it) => it.msgId === f.msg_id);
        if (mine) mine.pending = false;
        return changed(chat);
      }
      case "delta": {
        const st = chatState(chat);
        let item = st.items.find((it) => it.kind === "stream" && it.streamId === f.stream_id && !it.ended);
        if (!item) {
          item = { kind: "stream", streamId: f.stream_id, text: "" };
          st.items.push(item);
        }
        item.text += f.text;
        return changed(chat);
      }
      case "stream_end": {
        for (const it of chatState(chat).items) {
          if (it.kind === "stream" && it.streamId === f.stream_id) it.ended = true;
        }
        return;
      }
      case "user_message":
      case "message":
        onEntry(chat, f);
        return changed(chat);
      case "error":
        if (chat) {
          chatState(chat).items.push({ kind: "error", text: f.detail });
          changed(chat);
        }
        $("status").textContent = f.detail;
        return;
      default:
        return;
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const q = new URLSearchParams({ client_id: clientId, token });
    const socket = new WebSocket(`${scheme}//${location.host}${BASE || "/"}?${q}`);
    ws = socket;
    socket.onopen = () => {
      backoff = 500;
      $("status").textContent = "connected";
      for (const c of chats) {
        // A chat not loaded yet gets its whole log from the start ("0-0").
        chatState(c.id).loaded = true;
        socket.send(JSON.stringify({ type: "attach", chat_id: c.id, after: chatState(c.id).lastId }));
      }
      for (const m of outbox) socket.send(JSON.stringify({ type: "message", chat_id: m.chat, text: m.text, id: m.id }));
    };
    socket.onmessage = (e) => {
      try { onFrame(JSON.parse(e.data)); } catch (err) { console.warn("bad frame", err); }
    };
    socket.onclose = () => {
      if (ws !== socket) return;
      $("status").textContent = "reconnecting…";
      setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 10000);
    };
  }

  function send(text) {
    const chat = current;
    const id = randomId("m-");
    const c = chats.find((c) => c.id === chat);
    if (c && !c.title) { c.title = text.slice(0, 40); save("chats", chats); }
    chatState(chat).items.push({ kind: "user", text, msgId: id, pending: true });
    outbox.push({ chat, id, text });
    save("outbox", outbox);
    render();
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify({ type: "message", chat_id: chat, text, id }));
    }
  }

  // --- start --------------------------------------------------------------------------
  function showLogin(error) {
    $("app").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = error || "";
  }

  async function start() {
    $("login").hidden = true;
    $("app").hidden = false;
    if (!current) current = randomId("c-");
    try {
      await switchTo(current);
    } catch (err) {
      if (err.message !== "refused") $("status").textContent = "history unavailable";
      if (err.message === "refused") return;
    }
    for (const m of outbox) {
      const st = chatState(m.chat);
      if (!st.items.some((it) => it.msgId === m.id)) {
        st.items.push({ kind: "user", text: m.text, msgId: m.id, pending: true });
      }
    }
    render();
    connect();
  }

  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("token").value.trim();
    save("token", token);
    start();
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("input").value;
    if (!text.trim()) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("new-chat").addEventListener("click", () => {
    const id = randomId("c-");
    addChat(id);
    chatState(id).loaded = true;
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify({ type: "attach", chat_id: id, after: "0-0" }));
    }
    switchTo(id);
  });

  if (token) start(); else showLogin();
})();
