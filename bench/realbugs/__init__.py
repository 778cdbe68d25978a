"""The real-bug benchmark (issue 25): bug-fix commits from public repositories, scored on the version
before the fix. See bench/realbugs/README.md."""
