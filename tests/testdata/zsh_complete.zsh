# Prints what zsh's completion system offers for the command line in $LINE, one candidate per line after "CAND:".
# An interactive zsh runs in a pseudo-terminal (zsh/zpty), with clusterrun's completion script sourced and
# compadd wrapped to print what it adds; TAB completes the line, and the shell exits once the completion is done.
zmodload zsh/zpty || exit 2
zpty z zsh -f -i
zpty -w z 'PROMPT=; autoload -U compinit; compinit -u'
zpty -w z 'compadd() { local -a hits; builtin compadd -A hits "$@"; print -rl -- ${hits/#/CAND:} }'
zpty -w z 'comppostfuncs=(exit)'
zpty -w z 'source <(clusterrun completion zsh)'
zpty -n -w z "$LINE"$'\t'
while zpty -r z line; do print -rn -- "$line"; done
