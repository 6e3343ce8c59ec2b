"""End-to-end tests: Debian's Chromium, driven by Playwright, against the app served by Daphne."""
