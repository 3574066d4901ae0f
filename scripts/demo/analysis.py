# korch demo: a notebook-style analysis, one cell per "# %%".
# %% load
import pandas as pd
sales = pd.read_csv("sales.csv", parse_dates=["date"])
sales["revenue"] = sales["units"] * sales["price"]
print(f"{len(sales)} rows, {sales['date'].min():%Y-%m-%d} to {sales['date'].max():%Y-%m-%d}")

# %% state persists: `sales` is still here
by_region = sales.groupby("region")["revenue"].sum().sort_values(ascending=False)
by_region.round(2)

# %% a chart, captured from matplotlib without savefig
import matplotlib.pyplot as plt
monthly = sales.set_index("date").groupby([pd.Grouper(freq="M"), "product"])["revenue"].sum().unstack()
ax = monthly.plot(kind="bar", figsize=(8, 4.5), title="Revenue by month and product")
ax.set_xticklabels([d.strftime("%b") for d in monthly.index], rotation=0)
ax.set_ylabel("revenue")
plt.tight_layout()
plt.show()

# %% the answer
best = by_region.index[0]
print(f"best region: {best} ({by_region.iloc[0]:.2f}), {by_region.iloc[0] / by_region.sum():.0%} of revenue")
