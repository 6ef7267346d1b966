// What the TFJob pages (run.html, tenants.html) share: the Airflow UI's theme followed from
// inside its iframe, and elements built from text (never from markup).
"use strict";

function readAirflowTheme() {
  // The Airflow UI (next-themes) marks its <html> with the class "dark" or "light" and keeps
  // the choice in localStorage "theme"; this frame shares its origin. Else the browser's
  // prefers-color-scheme decides (run.css).
  try {
    const classes = window.parent.document.documentElement.classList;
    if (classes.contains("dark")) return "dark";
    if (classes.contains("light")) return "light";
  } catch (e) { /* not inside the UI */ }
  try {
    const stored = localStorage.getItem("theme");
    if (stored === "dark" || stored === "light") return stored;
  } catch (e) { /* no storage */ }
  return null;
}

function applyTheme() {
  const theme = readAirflowTheme();
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}

function followAirflowTheme(onChange) {
  try {
    new MutationObserver(() => { applyTheme(); if (onChange) onChange(); })
      .observe(window.parent.document.documentElement, { attributes: true, attributeFilter: ["class"] });
  } catch (e) { /* not inside the UI */ }
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

