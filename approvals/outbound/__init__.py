"""What the server sends out, for webhooks and notifications alike.

- ``posting``: where the server may POST to on a user's word (no address of this machine or its
  network), and the POST itself;
- ``deliveries``: sending recorded deliveries in the background, a lease per attempt and a retry
  schedule.
"""
