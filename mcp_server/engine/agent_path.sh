# AgentQueue sets BASH_ENV to this file in a run: a login shell (Codex runs `bash -lc`) resets PATH from
# /etc/profile, and this puts this install's `agentqueue` back at its end, after the system's own programs.
case ":$PATH:" in
  *":$AGENTQUEUE_BIN_DIR:"*) ;;
  *) [ -n "$AGENTQUEUE_BIN_DIR" ] && PATH="$PATH:$AGENTQUEUE_BIN_DIR" && export PATH ;;
esac
