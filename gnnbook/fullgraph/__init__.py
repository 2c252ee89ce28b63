"""Full-graph distributed GNN training (book chapter 6), one module per idea."""
