module github.com/cozystack/kubectl-flux-plunger/krew/launcher

go 1.20
