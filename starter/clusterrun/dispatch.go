package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/clusterrun/clusterrun/internal/version"
)

// rootCommand is the command tree. cobra dispatches, prints the top-level help and --version, and gives shell
// completion (clusterrun completion bash|zsh|fish|powershell); each command parses its own flags with the
// standard library (parse), so flags may come before, between or after arguments, with one dash or two.
func rootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "clusterrun",
		Short:         "run distributed training and test clusters as OS processes across hosts",
		Version:       version.String("clusterrun"),
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprint(stdout, topUsage)
			return &exitError{code: exitUsage}
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	for _, c := range commands() {
		root.AddCommand(&cobra.Command{
			Use:                c.name,
			Short:              shortOf(c.usage),
			DisableFlagParsing: true, // the command parses its own flags
			RunE: func(_ *cobra.Command, args []string) error {
				err := c.run(args, stdout, stderr)
				var ee *exitError
				if errors.As(err, &ee) && ee.command == "" {
					ee.command = c.name
				}
				return err
			},
			ValidArgsFunction: completer(c),
		})
	}
	root.AddCommand(&cobra.Command{Use: "version", Short: "print the version", DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			if asksHelp(args) {
				fmt.Fprintln(stdout, "Print clusterrun's version, commit, platform and Go version.\n\nUsage: clusterrun version (or clusterrun --version)")
				return nil
			}
			if len(args) > 0 {
				return &exitError{code: exitUsage, command: "version", msg: fmt.Sprintf("unexpected argument %q; usage: clusterrun version", args[0])}
			}
			fmt.Fprintln(stdout, version.String("clusterrun"))
			return nil
		}})
	root.CompletionOptions.DisableDefaultCmd = true // cobra's prints the whole help, exit 0, for a shell it lacks
	root.AddCommand(completionCommand(root, stdout))
	root.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		for _, c := range commands() {
			if c.name == cmd.Name() && cmd != root {
				_ = c.run([]string{"--help"}, stdout, stderr)
				return
			}
		}
		if cmd.Name() == "completion" {
			fmt.Fprint(stdout, completionUsage)
			return
		}
		fmt.Fprint(stdout, topUsage)
	})
	return root
}

const completionUsage = `Print a shell completion script for clusterrun's commands and flags.

Usage: clusterrun completion SHELL

SHELL is bash, zsh, fish or powershell.

Example:
  source <(clusterrun completion bash)
`

// completionShells are the shells completionCommand writes a script for, and how.
var completionShells = map[string]func(root *cobra.Command, w io.Writer) error{
	"bash":       func(root *cobra.Command, w io.Writer) error { return root.GenBashCompletionV2(w, true) },
	"zsh":        func(root *cobra.Command, w io.Writer) error { return root.GenZshCompletion(w) },
	"fish":       func(root *cobra.Command, w io.Writer) error { return root.GenFishCompletion(w, true) },
	"powershell": func(root *cobra.Command, w io.Writer) error { return root.GenPowerShellCompletionWithDesc(w) },
}

// completionCommand prints the completion script of the shell it is given; anything else is a usage error
// that names the shells.
func completionCommand(root *cobra.Command, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:                "completion",
		Short:              shortOf(completionUsage),
		DisableFlagParsing: true,
		ValidArgs:          []string{"bash", "zsh", "fish", "powershell"},
		RunE: func(_ *cobra.Command, args []string) error {
			if asksHelp(args) {
				fmt.Fprint(stdout, completionUsage)
				return nil
			}
			if len(args) != 1 {
				return &exitError{code: exitUsage, command: "completion",
					msg: "name one shell: bash, zsh, fish or powershell, as in: source <(clusterrun completion bash)"}
			}
			gen, ok := completionShells[args[0]]
			if !ok {
				return &exitError{code: exitUsage, command: "completion",
					msg: fmt.Sprintf("%q is not a shell clusterrun writes completion for: use bash, zsh, fish or powershell", args[0])}
			}
			return gen(root, stdout)
		},
	}
}

// asksHelp says whether the arguments of a command that parses no flags ask for its help.
func asksHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help")
}

// shortOf is a command's help text's first line.
func shortOf(usage string) string {
	first, _, _ := strings.Cut(usage, "\n")
	return strings.TrimSuffix(first, ".")
}
