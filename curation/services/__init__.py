"""Writes. Each public function is ``<entity>_<action>(*, ...)``; views, admin actions,
commands and tasks only parse input and call one of these."""
