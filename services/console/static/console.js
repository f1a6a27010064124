// rmqstore console: switches shown times between UTC and the browser's local time.
// Every time is a <time datetime="ISO-8601 UTC" data-ms="epoch ms"> rendered in UTC by the
// server; this only rewrites their text, keeping the offset visible, so both views name
// the same instant. The choice is kept in localStorage.
"use strict";

(function () {
  const KEY = "rmqstore.tz";

  function pad(n, width) {
    return String(Math.abs(n)).padStart(width || 2, "0");
  }

  function localText(ms) {
    const d = new Date(ms);
    const off = -d.getTimezoneOffset(); // minutes east of UTC
    const zone = off === 0 ? "Z" : (off > 0 ? "+" : "-") + pad(Math.trunc(Math.abs(off) / 60)) + ":" + pad(Math.abs(off) % 60);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." +
      pad(d.getMilliseconds(), 3) + zone;
  }

  function apply(local) {
    document.querySelectorAll("time[data-ms]").forEach(function (el) {
      const ms = Number(el.getAttribute("data-ms"));
      el.textContent = local ? localText(ms) : el.getAttribute("datetime");
    });
    const button = document.getElementById("tz-switch");
    const state = document.getElementById("tz-state");
    if (button) {
      button.setAttribute("aria-pressed", local ? "true" : "false");
      button.textContent = local ? "Show UTC" : "Show local time";
    }
    if (state) {
      state.textContent = local ? "Times in local time" : "Times in UTC";
    }
  }

  function stored() {
    try {
      return window.localStorage.getItem(KEY) === "local";
    } catch (e) {
      return false;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    let local = stored();
    apply(local);
    const button = document.getElementById("tz-switch");
    if (button) {
      button.addEventListener("click", function () {
        local = !local;
        try {
          window.localStorage.setItem(KEY, local ? "local" : "utc");
        } catch (e) {
          // private windows may refuse storage: the switch still works for this page
        }
        apply(local);
      });
    }
  });
})();
